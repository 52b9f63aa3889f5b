"""The ``dmrpc-gym`` command (also ``python -m dmrpc_gym``).

Each subcommand is two functions: ``add_<name>(subparsers)`` declares its
arguments and sets ``run=<function>``; the run function takes the parsed
arguments and returns the exit status. Add a subcommand by appending its
``add_`` function to :data:`COMMANDS`.

- ``serve TARGET``: serve a gymnasium env id, ``module:factory`` (a gymnasium or
  PettingZoo factory) or a PettingZoo env module over dm_env_rpc until
  interrupted; prints the address it listens on.

>>> build_parser().parse_args(["serve", "CartPole-v1", "--port", "0"]).port
0
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any, Callable

__all__ = ["main", "build_parser", "COMMANDS", "add_serve", "run_serve", "start_server"]


def _fail(command: str, message: Any) -> int:
    print(f"dmrpc-gym {command}: error: {message}", file=sys.stderr)
    return 1


# -- serve ------------------------------------------------------------------------------

def add_serve(subparsers: Any) -> None:
    """Declare ``dmrpc-gym serve``."""
    parser = subparsers.add_parser(
        "serve", help="serve a gymnasium or PettingZoo env over dm_env_rpc",
        description="Serve a gymnasium or PettingZoo env over dm_env_rpc (gRPC) until interrupted. "
                    "CreateWorld settings become the factory's keyword arguments; 'seed' seeds reset.")
    parser.add_argument("target", help="a gymnasium env id (CartPole-v1), module:factory "
                                       "(e.g. dmrpc_gym.worlds:Catch) or a PettingZoo env module "
                                       "(module:name with a parallel_env function)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to listen on (default: %(default)s; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=10000,
                        help="port to listen on; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--kind", choices=("gym", "pettingzoo"), default=None,
                        help="what the factory makes (default: told by the envs it makes)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a multi-agent wait may see no progress before it fails "
                             "(default: %(default)s)")
    parser.add_argument("--render", default="rgb_array", metavar="MODE",
                        help="'rgb_array' offers the RGB observation of envs that can render it "
                             "(default), 'none' offers none, another mode (e.g. 'human') is "
                             "passed to the envs as is")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every world and error")
    parser.set_defaults(run=run_serve)


def start_server(args: argparse.Namespace):
    """The started :class:`~dmrpc_gym.server.Server` that ``dmrpc-gym serve`` runs for ``args``.

    Raises ``ValueError`` / ``TypeError`` for a target that cannot be served,
    ``OSError`` when the address is busy.
    """
    from dmrpc_gym.server import Server

    render: bool | str = {"rgb_array": True, "none": False}.get(args.render, args.render)
    return Server(args.target, kind=args.kind, address=f"{args.host}:{args.port}",
                  render=render, timeout=args.timeout).start()


def run_serve(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym serve``: returns 0 when interrupted, 1 when the target cannot be served."""
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    if not 0 <= args.port <= 65535:
        return _fail("serve", f"--port must be within 0..65535, got {args.port}")
    try:
        server = start_server(args)
    except (ValueError, TypeError, OSError) as exc:
        return _fail("serve", exc)
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    print(f"serving {server.factory.name} on {server.address}", flush=True)
    try:
        while not stop.wait(0.5) and not server.wait(0):
            pass
    finally:
        server.stop(grace=1.0)
    return 0


#: The ``add_`` functions of every subcommand, in the order ``--help`` lists them.
COMMANDS: list[Callable[[Any], None]] = [add_serve]


def build_parser() -> argparse.ArgumentParser:
    """The ``dmrpc-gym`` argument parser with every subcommand of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="dmrpc-gym", description="dm_env_rpc worlds as gymnasium / PettingZoo envs, and back.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``dmrpc-gym``: parse ``argv`` and run the subcommand; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    return run(args)
