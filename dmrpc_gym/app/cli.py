"""The ``dmrpc-gym`` command (also ``python -m dmrpc_gym``).

Each subcommand is two functions: ``add_<name>(subparsers)`` declares its
arguments and sets ``run=<function>``; the run function takes the parsed
arguments and returns the exit status. Add a subcommand by appending its
``add_`` function to :data:`COMMANDS`.

- ``serve TARGET``: serve a bundled world (``catch``, ``tag``), a gymnasium env id,
  ``module:factory`` (a gymnasium, PettingZoo or dm_env factory, ``module`` found in the
  current directory as ``python -m`` finds it, or a file: ``./myenv.py:Corridor``), a
  PettingZoo env module, ``dm_control/DOMAIN-TASK`` or ``bsuite/ID`` over dm_env_rpc until
  interrupted (:data:`SERVE_TARGETS_HELP` lists them with examples); prints the address and
  a Python line to connect.
- ``inspect ADDRESS``: a world's actions, observations (of every agent) and properties, as tables or ``--json``.
- ``check ADDRESS``: gymnasium's / PettingZoo's API checks against the world, one verdict each.
- ``record ADDRESS --out run.gif``: a rollout (random or a saved SB3 model) rendered to a video.
- ``bench ADDRESS``: steps/s of a world with random actions.
- ``demo``: PPO learns Catch over dm_env_rpc; saves a learning curve.
- ``status ADDRESS``: a running server on one screen (health, worlds, steps/s, connections), ``--watch`` live.
- ``dashboard ADDRESS``: a local web page showing a running server live (worlds, plots, frames); prints its URL.

Ctrl-C ends a client command with one line and status 130; `serve` stops quietly with status 0.

>>> build_parser().parse_args(["serve", "CartPole-v1", "--port", "0"]).port
0
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from dmrpc_gym.app.client_args import add_connection_arguments, add_world_arguments, world_kwargs, world_name_shown
from dmrpc_gym.app.dashboard_command import add_dashboard, run_dashboard

from dmrpc_gym.client.seeding import AUTO
from dmrpc_gym.server.envs.factories import KINDS
from dmrpc_gym._extras import install_hint

__all__ = ["main", "build_parser", "COMMANDS", "SERVE_TARGETS_HELP", "add_serve", "run_serve", "add_inspect", "run_inspect", "add_check", "run_check", "add_record", "run_record",
           "add_bench", "run_bench", "add_demo", "run_demo", "add_status", "run_status", "add_dashboard",
           "run_dashboard"]


def _fail(command: str, message: Any) -> int:
    print(f"dmrpc-gym {command}: error: {message}", file=sys.stderr)
    return 1


# -- serve ------------------------------------------------------------------------------

#: The kinds of target ``serve`` takes, each with an example (the epilog of ``serve --help``; a
#: reStructuredText literal block too, as the docs' CLI reference renders it).
SERVE_TARGETS_HELP = """\
kinds of TARGET, each with an example::

  catch, tag                        a bundled world, named as the client commands name it
                                      dmrpc-gym serve catch
  ENV_ID                            a registered gymnasium env id
                                      dmrpc-gym serve CartPole-v1
  module:factory                    a callable returning a gymnasium Env, a PettingZoo ParallelEnv
                                    or AECEnv, or a dm_env.Environment (module found in the current
                                    directory, as python -m finds it)
                                      dmrpc-gym serve dmrpc_gym.worlds:Catch
  path/to/file.py:factory           the same, from a file
                                      dmrpc-gym serve ./envs/myenv.py:Corridor
  PETTINGZOO_MODULE                 a PettingZoo env module (its parallel_env(); a turn-based
                                    game's env(), played turn by turn)
                                      dmrpc-gym serve pettingzoo.butterfly.pistonball_v6
                                      dmrpc-gym serve pettingzoo.classic.tictactoe_v3:env
  dm_control/DOMAIN-TASK            a dm_control suite task (the dm_control extra)
                                      dmrpc-gym serve dm_control/cartpole-balance
  bsuite/ID                         a bsuite experiment (the bsuite extra)
                                      dmrpc-gym serve bsuite/catch/0
"""

def add_serve(subparsers: Any) -> None:
    """Declare ``dmrpc-gym serve``."""
    from dmrpc_gym.server.running.workers import DEFAULT_WORKERS, INLINE_BELOW
    parser = subparsers.add_parser(
        "serve", help="serve a gymnasium, PettingZoo or dm_env environment over dm_env_rpc",
        description="Serve a gymnasium, PettingZoo or dm_env environment over dm_env_rpc (gRPC) until "
                    "interrupted. CreateWorld settings become the factory's keyword arguments; 'seed' "
                    "seeds reset.",
        epilog=SERVE_TARGETS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", help="what to serve: one of the kinds of target listed below")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to listen on (default: %(default)s; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=10000,
                        help="port to listen on; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--unix", metavar="PATH",
                        help="listen on a Unix domain socket at PATH instead of TCP (mode 0600; clients "
                             "connect to unix:PATH); a stale socket file there is replaced")
    parser.add_argument("--kind", choices=KINDS, default=None,
                        help="what the factory makes (default: told by the envs it makes)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a multi-agent wait may see no progress before it fails "
                             "(default: %(default)s)")
    parser.add_argument("--render", default="rgb_array", metavar="MODE",
                        help="'rgb_array' offers the RGB observation of envs that can render it "
                             "(default), 'none' offers none, another mode (e.g. 'human') is "
                             "passed to the envs as is")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="threads env calls run on, so that worlds step concurrently "
                             f"(default: {DEFAULT_WORKERS}, started as needed; 0 runs envs on the event loop)")
    parser.add_argument("--inline-below", type=float, default=INLINE_BELOW, metavar="SECONDS",
                        help="an env whose recent steps each took less runs them on the event loop, "
                             "cheaper than a thread hand-off (default: %(default)s; 0: never)")
    parser.add_argument("--processes", type=int, default=0, metavar="N",
                        help="build and step envs in N worker processes, for pure-Python envs "
                             "(default: 0, envs in the server's process)")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate (chain) file")
    parser.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    parser.add_argument("--token", help="a shared secret every call must carry (metadata "
                                        "'authorization: Bearer TOKEN'); default: $DMRPC_GYM_TOKEN if set")
    parser.add_argument("--max-message-size", type=int, default=None, metavar="BYTES",
                        help="largest request accepted (default: 64 MiB)")
    parser.add_argument("--max-worlds", type=int, default=1024, metavar="N", help="worlds held at most (default: 1024)")
    parser.add_argument("--max-worlds-per-connection", type=int, default=64, metavar="N",
                        help="worlds one connection may have made and not destroyed (default: %(default)s)")
    parser.add_argument("--orphan-lifetime", type=float, default=60.0, metavar="SECONDS",
                        help="how long a world whose creator left waits to be joined (default: %(default)s)")
    parser.add_argument("--max-connections", type=int, default=1024, metavar="N",
                        help="connections open at once; more are accepted and closed (default: %(default)s)")
    parser.add_argument("--keepalive-min-time", type=float, default=300.0, metavar="SECONDS",
                        help="while a call is open, a client's PINGs closer together than this are strikes "
                             "(grpc-go's EnforcementPolicy.MinTime, C-core's "
                             "grpc.http2.min_ping_interval_without_data_ms; default: %(default)s)")
    parser.add_argument("--max-ping-strikes", type=int, default=2, metavar="N",
                        help="strikes allowed before the connection ends with GOAWAY ENHANCE_YOUR_CALM "
                             "too_many_pings (C-core's grpc.http2.max_ping_strikes; default: %(default)s)")
    parser.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                        help="on SIGTERM, how long running episodes may go on before the server stops; new "
                             "worlds are refused meanwhile (default: %(default)s)")
    parser.add_argument("--health-without-token", action="store_true",
                        help="answer gRPC health checks without the token (for probes that cannot send one)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus metrics over HTTP on PORT at /metrics (0: a free one, printed); "
                             "needs prometheus-client (the metrics extra); default: no metrics")
    parser.add_argument("--metrics-host", default=None, metavar="HOST",
                        help="the interface of --metrics-port (default: --host; 127.0.0.1 with --unix)")
    parser.add_argument("--no-shared-memory", dest="shared_memory", action="store_false",
                        help="offer no shared memory: our clients on this host send every tensor in the messages "
                             "(by default their large tensors go through regions they share with the server, and "
                             "their TCP connections move to the server's Unix socket)")
    parser.add_argument("--max-shared-memory", type=int, default=1 << 30, metavar="BYTES",
                        help="the largest shared-memory region one connection may give (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every world and error")
    parser.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym serve``: returns 0 when interrupted, 1 when the target cannot be served."""
    from dmrpc_gym.app.serve_command import serve_until_stopped
    try:
        return serve_until_stopped(args)
    except (ValueError, TypeError, OSError, ImportError) as exc:
        return _fail("serve", exc)


# -- inspect / bench / demo: client-side tools ----------------------------------------------

def _run_client(command: str, job: Callable[[], None]) -> int:
    """Run ``job``; an unreachable server or a refused request is one line on stderr and status 1."""
    from dmrpc_gym.protocol.errors import DmRpcError
    try:
        job()
    except BrokenPipeError:                  # our own stdout closed (`| head`): handled by main()
        raise
    except (ConnectionError, TimeoutError, DmRpcError, ValueError) as exc:
        # The client's Python names for the limits are this command's options here.
        return _fail(command, str(exc).replace("(connect_timeout)", "(--wait)").replace(
            "(connect_timeout=None)", "(--wait)"))
    return 0


def add_inspect(subparsers: Any) -> None:
    """Declare ``dmrpc-gym inspect``."""
    parser = subparsers.add_parser(
        "inspect", help="show a world's actions, observations and properties",
        description="Join a world and print every action and observation spec (UID, dtype, shape, bounds, "
                    "the gymnasium space it becomes or why none) of every agent, and its properties; then leave.")
    add_world_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help='print the report as JSON (RFC 8259: infinite bounds are the strings "inf" and '
                             '"-inf", a NaN is "nan")')
    parser.set_defaults(run=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym inspect``."""
    from dmrpc_gym.app.report import format_report, inspect_world
    from dmrpc_gym.app.report_json import report_json

    def job() -> None:
        kwargs = world_kwargs(args)
        report = inspect_world(kwargs.pop("address"), **kwargs)
        report.address = world_name_shown(args, report.address)
        width = shutil.get_terminal_size((120, 24)).columns     # $COLUMNS, the terminal's, else 120
        print(json.dumps(report_json(report), indent=2, allow_nan=False) if args.json else format_report(report, width))
    return _run_client("inspect", job)


def _add_seed_setting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed-setting", default=AUTO, metavar="NAME",
                        help="the Reset setting that carries reset(seed=...) to the server; '' for none "
                             "(default: %(default)s: 'seed' on a dmrpc_gym server, none elsewhere)")


def add_check(subparsers: Any) -> None:
    """Declare ``dmrpc-gym check``."""
    parser = subparsers.add_parser(
        "check", help="run gymnasium's (or PettingZoo's) API checks against a world",
        description="Run the checks of gymnasium's check_env (or PettingZoo's parallel_api_test and "
                    "parallel_seed_test for a multi-agent world) against a remote world and print a "
                    "verdict per check. Exit status 1 if any check failed.")
    add_world_arguments(parser)
    _add_seed_setting(parser)
    parser.set_defaults(run=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym check``: 0 when no check failed."""
    from dmrpc_gym.app.check import check_world, format_verdicts
    failed = []

    def job() -> None:
        kwargs = world_kwargs(args)
        address = kwargs.pop("address")
        kind, verdicts = check_world(address, seed_setting=args.seed_setting or None, **kwargs)
        print(format_verdicts(world_name_shown(args, address), kind, verdicts), flush=True)
        failed.extend(v for v in verdicts if v.status == "FAIL")
    status = _run_client("check", job)
    return status or (1 if failed else 0)


def add_record(subparsers: Any) -> None:
    """Declare ``dmrpc-gym record``."""
    parser = subparsers.add_parser(
        "record", help="render a rollout of a world to a .gif or .mp4",
        description="Play a world with random actions (or a saved Stable-Baselines3 model) and write its "
                    "RGB observations to a video: .gif (Pillow) or .mp4 (imageio-ffmpeg); the video extra "
                    "has both.")
    add_world_arguments(parser)
    parser.add_argument("--out", required=True, metavar="FILE", help="the video to write: run.gif or run.mp4")
    parser.add_argument("--steps", type=int, default=200, help="steps to play (default: %(default)s)")
    parser.add_argument("--fps", type=int, default=10, help="frames per second (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    parser.add_argument("--model", metavar="FILE", help="a saved SB3 model (trained through FlatSpaces) to play")
    parser.add_argument("--algo", default="PPO", help="the SB3 algorithm of --model (default: %(default)s)")
    parser.add_argument("--render-observation", metavar="NAME",
                        help="the uint8 HxWx3 observation to record (default: RGB)")
    _add_seed_setting(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run_record)


def run_record(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym record``."""
    from dmrpc_gym.app.record import record

    def job() -> None:
        kwargs = world_kwargs(args)
        result = record(kwargs.pop("address"), args.out, steps=args.steps, fps=args.fps, seed=args.seed,
                        model=args.model, algo=args.algo, seed_setting=args.seed_setting or None,
                        progress=not args.no_progress, render_observation=args.render_observation, **kwargs)
        print(f"wrote {result['path']}: {result['frames']} frames, {result['episodes']} episodes ended", flush=True)
    return _run_client("record", job)


def add_bench(subparsers: Any) -> None:
    """Declare ``dmrpc-gym bench``."""
    parser = subparsers.add_parser(
        "bench", help="measure steps/s of a world with random actions",
        description="Step a world with random actions and print the steps per second of DmRpcEnv "
                    "(and of DmRpcVectorEnv with --num-envs > 1).")
    add_world_arguments(parser)
    parser.add_argument("--steps", type=int, default=2000, help="steps to time (default: %(default)s)")
    parser.add_argument("--num-envs", type=int, default=1, metavar="N",
                        help="also measure a DmRpcVectorEnv of N sub-envs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random actions (default: %(default)s)")
    parser.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym bench``."""
    from dmrpc_gym.app.bench import bench
    if args.steps < 1 or args.num_envs < 1:
        return _fail("bench", "--steps and --num-envs must be at least 1")

    def job() -> None:
        kwargs = world_kwargs(args)
        address = kwargs.pop("address")
        bench(address, steps=args.steps, num_envs=args.num_envs, seed=args.seed,
              name=world_name_shown(args, address), **kwargs)
    return _run_client("bench", job)


def add_demo(subparsers: Any) -> None:
    """Declare ``dmrpc-gym demo``."""
    parser = subparsers.add_parser(
        "demo", help="train PPO on Catch over dm_env_rpc and plot the learning curve",
        description="Start the embedded Catch server, measure a random policy, train Stable-Baselines3 PPO "
                    "(needs the sb3 extra), measure again and save a learning-curve PNG.")
    parser.add_argument("--timesteps", type=int, default=30_000, help="training steps (default: %(default)s)")
    parser.add_argument("--envs", type=int, default=4, help="parallel envs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    parser.add_argument("--out", default="catch_learning_curve.png",
                        help="where to save the learning curve (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (the measurements are still printed)")
    parser.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym demo``."""
    for flag, value in (("--envs", args.envs), ("--timesteps", args.timesteps)):
        if value < 1:
            return _fail("demo", f"{flag} {value}: expected at least 1")
    missing = [name for name in ("stable_baselines3", "torch", "matplotlib")
               if importlib.util.find_spec(name) is None]
    if missing:
        return _fail("demo", f"the demo trains with Stable-Baselines3 and plots with matplotlib; "
                             f"{', '.join(missing)} not installed: {install_hint('sb3')}")
    try:
        from dmrpc_gym.app.demo import run_demo as demo
    except ImportError as exc:
        return _fail("demo", f"{exc}; install the sb3 extra: {install_hint('sb3')}")
    if args.out:
        folder = Path(args.out).parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            return _fail("demo", f"--out {args.out!r}: directory {str(folder)!r} does not exist or is not "
                                 "writable (checked before training)")
    return _run_client("demo", lambda: demo(total_timesteps=args.timesteps, n_envs=args.envs, seed=args.seed,
                                            out=args.out, progress=not args.no_progress))


def add_status(subparsers: Any) -> None:
    """Declare ``dmrpc-gym status``."""
    parser = subparsers.add_parser(
        "status", help="show a running server: health, worlds, steps/s, connections",
        description="Show a running dmrpc_gym server on one screen: health (serving, draining), its worlds "
                    "with their kind, agents, steps per second and step time (in the env and in all), "
                    "connections, errors and refusals. It reads the server's dmrpc_gym.server_status property "
                    "over an ordinary connection (token, TLS and unix: addresses as for any client).")
    parser.add_argument("address", help="host:port or unix:PATH of a dmrpc_gym server")
    add_connection_arguments(parser)
    parser.add_argument("--watch", "-w", action="store_true", help="refresh every --interval until Ctrl-C")
    parser.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                        help="seconds between readings; rates are over it (default: %(default)s; 0: one "
                             "reading, rates over each world's life)")
    parser.add_argument("--json", action="store_true",
                        help="print the reading as JSON (with --watch: one document a line)")
    parser.set_defaults(run=run_status)


def run_status(args: argparse.Namespace) -> int:
    """Run ``dmrpc-gym status``."""
    from dmrpc_gym.app.client_args import connection_kwargs
    from dmrpc_gym.app.status import StatusReader, watch
    if args.interval < 0 or (args.watch and args.interval == 0):
        return _fail("status", f"--interval {args.interval}: expected seconds > 0 (0 only without --watch)")

    def job() -> None:
        with StatusReader(args.address, **connection_kwargs(args)) as reader:
            watch(reader, args.address, interval=args.interval, forever=args.watch, as_json=args.json)
    return _run_client("status", job)


#: The ``add_`` functions of every subcommand, in the order ``--help`` lists them.
COMMANDS: list[Callable[[Any], None]] = [add_serve, add_inspect, add_check, add_record, add_bench, add_demo,
                                         add_status, add_dashboard]


def build_parser() -> argparse.ArgumentParser:
    """The ``dmrpc-gym`` argument parser with every subcommand of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="dmrpc-gym", description="dm_env_rpc worlds as gymnasium / PettingZoo envs, and back.")
    from dmrpc_gym._version import __version__
    parser.add_argument("--version", action="version", version=f"dmrpc-gym {__version__}")
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
    try:
        return run(args)
    except BrokenPipeError:                  # `dmrpc-gym inspect catch | head`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:                # Ctrl-C: one line, the shell's status for SIGINT
        print(f"\ndmrpc-gym {args.command}: interrupted", file=sys.stderr)
        return 130
