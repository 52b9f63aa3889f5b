"""``dmrpc-gym dashboard``: its arguments, and running it until Ctrl-C (the page: :mod:`dmrpc_gym.app.dashboard`).

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_dashboard(parser.add_subparsers())
>>> args = parser.parse_args(["dashboard", "h:1", "--host", "0.0.0.0", "--allow-remote"])
>>> args.host, args.port, args.allow_remote
('0.0.0.0', 0, True)
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from dmrpc_gym.app.client_args import add_connection_arguments

__all__ = ["add_dashboard", "run_dashboard"]


def fail(message: Any) -> int:
    """Say what went wrong as every ``dmrpc-gym`` command does (one line on stderr); status 1."""
    print(f"dmrpc-gym dashboard: error: {message}", file=sys.stderr)
    return 1


def add_dashboard(subparsers: Any) -> None:
    """Declare ``dmrpc-gym dashboard``."""
    parser = subparsers.add_parser(
        "dashboard", help="a local web page showing a running server live: worlds, plots, frames",
        description="Serve a local web page that shows a running dmrpc_gym server live: its health, uptime, "
                    "connections and worlds, each world's episodes, step, return, last reward and step times, "
                    "plots of steps/s, step time and episode returns, and the frames of a world the page picks. "
                    "It reaches the server as a client does (token, TLS and unix: addresses as for any client) "
                    "and prints the page's URL. What it shows beyond `dmrpc-gym status` is collected by the "
                    "server only while a dashboard watches.")
    parser.add_argument("address", help="host:port or unix:PATH of a dmrpc_gym server")
    add_connection_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address the page is served on (default: %(default)s, this machine only)")
    parser.add_argument("--port", type=int, default=0, help="the page's port (default: 0, one the OS picks)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a --host that is not a loopback address (anyone who reaches it sees the "
                             "server's worlds and frames)")
    parser.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                        help="seconds between readings of the server (default: %(default)s)")
    parser.set_defaults(run=run_dashboard)


def run_dashboard(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym dashboard`` until interrupted."""
    import time
    from dmrpc_gym.app.client_args import connection_kwargs
    from dmrpc_gym.app.dashboard import DashboardServer
    if args.interval <= 0:
        return fail(f"--interval {args.interval}: expected seconds > 0")
    try:
        dashboard = DashboardServer(args.address, args.host, args.port, allow_remote=args.allow_remote,
                                    interval=args.interval, say=lambda line: print(f"dmrpc-gym dashboard: {line}",
                                                                                   file=sys.stderr, flush=True),
                                    **connection_kwargs(args))
    except (ValueError, OSError) as exc:
        return fail(exc)
    try:
        print(f"dmrpc-gym dashboard of {args.address}: {dashboard.url} (Ctrl-C to stop)", flush=True)
        while True:     # short sleeps: a Ctrl-C that lands just before a wait begins would not wake an endless one
            time.sleep(0.5)
    finally:
        dashboard.close()
