"""The dashboard's local web server (the standard library's ``http.server``): the page, its state, the frame.

Safe by default: it binds to ``127.0.0.1``; a host that is not a loopback address needs
``allow_remote=True`` (``--allow-remote``), since the page shows the server's worlds to whoever
reaches it. Every request's ``Host`` header must name the dashboard by an IP address or
``localhost`` with its port (:func:`host_allowed`): a page of another site whose name was made to
resolve to this machine (DNS rebinding) is refused with 403, and so is a POST whose ``Origin`` is
another site's. No CORS header is ever sent, so other sites' scripts cannot read the answers. The
server's token stays in the :class:`~dmrpc_gym.app.dashboard.feed.Feed`: the page only ever gets
what :meth:`~dmrpc_gym.app.dashboard.feed.Feed.state` gives.

Routes: ``GET /`` the page; ``GET /api/state`` the state (JSON); ``GET /api/frame.png`` the
chosen world's latest frame; ``POST /api/watch`` ``{"world": NAME, "fps": RATE}``; ``POST /api/report``
``{"errors": [...]}``, the page's own script errors (kept in :attr:`DashboardServer.page_errors`
and logged).

>>> host_allowed("127.0.0.1:8000", 8000), host_allowed("localhost:8000", 8000), host_allowed("evil.example:8000", 8000)
(True, True, False)
>>> check_bind("0.0.0.0", allow_remote=False)
Traceback (most recent call last):
...
ValueError: --host 0.0.0.0 is not a loopback address: anyone who reaches it sees the server's worlds and frames; pass --allow-remote to bind it anyway
"""
from __future__ import annotations

import ipaddress
import json
import logging
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

from dmrpc_gym.app.dashboard.feed import Feed
from dmrpc_gym.app.dashboard.page import PAGE

__all__ = ["DashboardServer", "host_allowed", "check_bind", "is_loopback"]

log = logging.getLogger("dmrpc_gym.dashboard")
_MAX_BODY = 64 * 1024
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                               "img-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only: ``localhost``, ``127.x``, ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, allow_remote: bool) -> None:
    """``ValueError`` when ``host`` is not a loopback address and ``allow_remote`` is False."""
    if not allow_remote and not is_loopback(host):
        raise ValueError(f"--host {host} is not a loopback address: anyone who reaches it sees the server's "
                         f"worlds and frames; pass --allow-remote to bind it anyway")


def host_allowed(header: str | None, port: int) -> bool:
    """Whether a request's ``Host`` (or an ``Origin``'s host and port) names the dashboard: an IP address or
    ``localhost``, with its ``port``. A DNS name could be another site's made to resolve here (DNS rebinding)."""
    if not header:
        return False
    try:
        parts = urlsplit("//" + header)
        name, given = parts.hostname, parts.port
    except ValueError:
        return False
    if name is None or given != port:
        return False
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class _Handler(BaseHTTPRequestHandler):
    server: "_HTTPServer"
    server_version = "dmrpc-gym-dashboard"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for key, value in _SECURITY_HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, document: Any) -> None:
        self._send(code, json.dumps(document).encode(), "application/json")

    def _refused(self) -> bool:
        """Answer 403 and return True for a request not addressed to the dashboard by address."""
        port = self.server.server_address[1]
        if not host_allowed(self.headers.get("Host"), port):
            self._send(403, b"this dashboard answers only requests addressed to it by IP address or localhost "
                            b"(Host header), as a defence against DNS rebinding\n", "text/plain; charset=utf-8")
            return True
        origin = self.headers.get("Origin")
        if self.command == "POST" and origin is not None and not host_allowed(urlsplit(origin).netloc, port):
            self._send(403, b"a request from another site's page\n", "text/plain; charset=utf-8")
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self._refused():
            return
        path = urlsplit(self.path).path
        dashboard = self.server.dashboard
        if path in ("/", "/index.html"):
            self._send(200, PAGE.encode(), "text/html; charset=utf-8")
        elif path == "/api/state":
            self._json(200, dashboard.feed.state())
        elif path == "/api/frame.png":
            frame = dashboard.feed.frame()
            if frame is None:
                self._send(404, b"no frame yet\n", "text/plain; charset=utf-8")
            else:
                self._send(200, frame, "image/png")
        elif path == "/favicon.ico":
            self._send(204, b"", "image/x-icon")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self._refused():
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            self._send(413, b"too large\n", "text/plain; charset=utf-8")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            self._json(400, {"error": f"the body is not a JSON object: {exc}"})
            return
        path = urlsplit(self.path).path
        dashboard = self.server.dashboard
        try:
            if path == "/api/watch":
                dashboard.feed.choose(str(body.get("world") or ""), float(body.get("fps", 1.0)))
                self._json(200, {"watch": dashboard.feed.state()["watch"]})
            elif path == "/api/report":
                errors = [str(e)[:2000] for e in body.get("errors", [])][:20]
                dashboard.page_errors.extend(errors)
                for error in errors:
                    log.warning("the dashboard page reported: %s", error)
                self._json(200, {"kept": len(errors)})
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
        except (ValueError, TypeError) as exc:
            self._json(400, {"error": str(exc)})


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    dashboard: "DashboardServer"

    def __init__(self, address: tuple[str, int], handler: type) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


class DashboardServer:
    """The page for one server, served on ``host:port`` (0: a port the OS picks) until :meth:`close`.

    ``ValueError`` for a non-loopback ``host`` without ``allow_remote``; ``connection`` goes to the
    :class:`~dmrpc_gym.app.dashboard.feed.Feed` (``token``, ``tls``, ``connect_timeout``...).

    >>> with DashboardServer("127.0.0.1:1", connect_timeout=0.1) as dash:
    ...     dash.url.startswith("http://127.0.0.1:")
    True
    """

    def __init__(self, address: str, host: str = "127.0.0.1", port: int = 0, *, allow_remote: bool = False,
                 interval: float = 1.0, say: Callable[[str], None] | None = None, **connection: Any):
        check_bind(host, allow_remote)
        self.feed = Feed(address, interval=interval, say=say, **connection)
        #: Script errors the page reported (``POST /api/report``).
        self.page_errors: list[str] = []
        self._http = _HTTPServer((host, port), _Handler)
        self._http.dashboard = self
        bound = self._http.server_address[0]
        shown = f"[{bound}]" if ":" in bound else ("127.0.0.1" if bound in ("0.0.0.0", "") else bound)
        #: Where the page is.
        self.url = f"http://{shown}:{self._http.server_address[1]}/"
        self.feed.start()
        self._thread = threading.Thread(target=self._http.serve_forever, name="dmrpc-gym-dashboard-http",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving the page and reading the server."""
        self._http.shutdown()
        self._http.server_close()
        self.feed.close()

    def __enter__(self) -> "DashboardServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
