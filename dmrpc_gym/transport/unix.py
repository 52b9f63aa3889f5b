"""Unix domain sockets: gRPC's ``unix:`` addresses on both ends, and the server's socket file.

A client and a server on one machine skip TCP's loopback path (checksums,
acknowledgements, Nagle), which on a small step is a measurable share of the
round trip. The address forms are gRPC's, so grpcio peers read the same
strings: ``unix:PATH`` (relative or absolute) and ``unix:///ABSOLUTE/PATH``.

The server's socket file is made readable and writable by its owner only
(0600): on a shared machine the file's permissions are the access control.
A file left by a server that died is replaced; a socket that a live server
still answers on is refused as in use, and a path that is no socket is never
touched. The server removes its file when it stops.

>>> unix_path("unix:/tmp/world.sock"), unix_path("unix:///tmp/world.sock"), unix_path("unix:world.sock")
('/tmp/world.sock', '/tmp/world.sock', 'world.sock')
>>> unix_path("127.0.0.1:10000") is None
True
"""
from __future__ import annotations

import asyncio
import os
import socket
import stat
from typing import Any, Callable

__all__ = ["unix_path", "unix_address", "connect_unix", "listen_unix", "remove_socket_file"]

_PREFIX = "unix:"
_MODE = 0o600


def unix_path(address: str) -> str | None:
    """The socket path of a ``unix:`` address; None for any other address."""
    if not address.startswith(_PREFIX):
        return None
    rest = address[len(_PREFIX):]
    if rest.startswith("//"):                 # unix://ABSOLUTE: the path keeps its leading "/"
        rest = rest[2:]
        if not rest.startswith("/"):
            raise ValueError(f"address {address!r}: unix:// takes an absolute path (unix:///tmp/x.sock); "
                             f"write unix:{rest} for a relative one")
    if not rest:
        raise ValueError(f"address {address!r} names no socket path (unix:PATH)")
    return rest


def unix_address(path: str) -> str:
    """The ``unix:`` address of ``path``, as clients (ours and grpcio) take it."""
    return _PREFIX + path


def connect_unix(path: str, timeout: float | None) -> socket.socket:
    """A stream socket connected to the server at ``path`` (``OSError`` when none answers)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def _clear_stale(path: str) -> None:
    """Remove a socket file that no server answers on; refuse one in use or a path that is no socket."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"cannot serve on unix:{path}: the path exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)                      # left by a server that is gone
        return
    except OSError:
        pass
    finally:
        probe.close()
    raise OSError(f"cannot serve on unix:{path}: another server is listening there")


async def listen_unix(new_protocol: Callable[[], asyncio.Protocol], path: str, **options: Any) -> asyncio.Server:
    """Listen on ``path`` (a stale file replaced), the file's mode 0600 from its creation on."""
    _clear_stale(path)
    old = os.umask(0o177)                    # no moment in which others may connect
    try:
        server = await asyncio.get_running_loop().create_unix_server(new_protocol, path, **options)
    finally:
        os.umask(old)
    os.chmod(path, _MODE)
    return server


def remove_socket_file(path: str) -> None:
    """Remove the server's socket file if it is still there (and still a socket)."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass
