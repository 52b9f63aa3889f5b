"""The arguments every client command of ``dmrpc-gym`` shares (``inspect``, ``check``, ``record``,
``bench``): which world, and how to reach its server (``--wait``, ``--token``, ``--tls-ca``, ``--compression``;
``status`` takes these alone).

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_world_arguments(parser)
>>> args = parser.parse_args(["h:1", "-s", "rows=5", "--wait", "30", "--compression", "gzip"])
>>> kwargs = world_kwargs(args)
>>> kwargs["world_settings"], kwargs["connect_timeout"], kwargs["compression"]
({'rows': 5}, 30.0, 'gzip')
"""
from __future__ import annotations

import argparse
import ast
import os
from pathlib import Path
from typing import Any

__all__ = ["add_world_arguments", "add_connection_arguments", "world_kwargs", "connection_kwargs",
           "world_name_shown", "setting"]


def setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> ``(key, value)``; the value is a Python literal when it parses as one, else a str."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def add_world_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments every client command shares: the world, and how to reach its server."""
    parser.add_argument("address", help="host:port of a dm_env_rpc server, or a bundled world "
                                        "('catch', 'tag') served in-process")
    parser.add_argument("--setting", "-s", type=setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a CreateWorld setting (repeatable); VALUE is a Python literal or a string")
    parser.add_argument("--world", metavar="NAME", help="join this existing world instead of creating one")
    parser.add_argument("--join", type=setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a JoinWorld setting (repeatable)")
    add_connection_arguments(parser)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare how to reach a server: ``--wait``, ``--token``, ``--tls-ca``, ``--compression``."""
    parser.add_argument("--wait", "--connect-timeout", dest="wait", type=float, default=5.0, metavar="SECONDS",
                        help="seconds to wait for the server: one that is not listening yet or answers "
                             "UNAVAILABLE is retried until then (default: %(default)s)")
    parser.add_argument("--token", help="the server's shared secret (sent as 'authorization: Bearer TOKEN'); "
                                        "default: $DMRPC_GYM_TOKEN if set")
    parser.add_argument("--tls-ca", metavar="PEM",
                        help="connect with TLS, verifying the server with this CA bundle (for a self-signed "
                             "server: its certificate); 'system' for the system's CA store")
    parser.add_argument("--compression", choices=("gzip", "deflate"),
                        help="compress requests (worth it only for large actions on slow links)")


def world_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of the client tools (``inspect_world``, ``check_world``, ``record``, ``bench``)
    for ``args``; ``ValueError`` naming a ``--tls-ca`` file that does not exist."""
    from dmrpc_gym.worlds.embedded import WORLDS, embedded_server
    address = embedded_server(args.address).address if args.address in WORLDS else args.address
    return dict(address=address, world_settings=dict(args.setting) or None, world_name=args.world,
                join_settings=dict(args.join) or None, **connection_kwargs(args))


def connection_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The connection keywords (``connect_timeout``, ``tls``, ``token``, ``compression``) for ``args``;
    ``ValueError`` naming a ``--tls-ca`` file that does not exist."""
    tls: Any = None
    if args.tls_ca is not None:
        tls = True if args.tls_ca == "system" else args.tls_ca
        if tls is not True and not Path(tls).is_file():
            raise ValueError(f"--tls-ca {args.tls_ca!r}: no such file (the current directory is {os.getcwd()})")
    return dict(connect_timeout=args.wait, tls=tls, token=args.token, compression=args.compression)


def world_name_shown(args: argparse.Namespace, address: str) -> str:
    """What output calls the world: a bundled world by its name (``catch``), not the
    in-process server's passing port; any other by its address."""
    from dmrpc_gym.worlds.embedded import WORLDS
    return args.address if args.address in WORLDS else address
