"""``dmrpc-gym check ADDRESS``: gymnasium's (or PettingZoo's) API checks against a remote world, one verdict each.

A gymnasium world is checked with the functions gymnasium's ``check_env`` runs,
called one at a time so that each gets its own verdict (``ok``, ``warn`` with
the warnings it raised, or ``FAIL`` with its error). A multi-agent world (one
whose ``agents`` property lists several agents) gets PettingZoo's
``parallel_api_test`` and ``parallel_seed_test``. What an engine developer
implementing dm_env_rpc wants first: does my world behave as the Python RL
ecosystem expects?
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import warnings
from typing import Any, Callable, Mapping

from dmrpc_gym.client.seeding import AUTO

__all__ = ["Verdict", "check_world", "format_verdicts", "gym_checks"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclasses.dataclass
class Verdict:
    """One check's outcome: ``status`` is ``"ok"``, ``"warn"`` or ``"FAIL"``; ``detail`` says why."""

    name: str
    status: str
    detail: str = ""


def _run(name: str, check: Callable[[], Any]) -> Verdict:
    # PettingZoo's tests print their progress: kept out of the verdicts' output.
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - a failed check is the verdict
            return Verdict(name, "FAIL", f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    messages = list(dict.fromkeys(" ".join(_ANSI.sub("", str(w.message)).split()) for w in caught))
    return Verdict(name, "warn", "; ".join(messages)) if messages else Verdict(name, "ok")


def gym_checks(env: Any, make: Callable[[], Any]) -> list[tuple[str, Callable[[], Any]]]:
    """``(name, check)`` for each check of gymnasium's ``check_env``, against ``env``;
    ``make()`` builds a second env (for the close check)."""
    from gymnasium.utils import env_checker as ec
    from gymnasium.utils import passive_env_checker as pc

    def spaces(kind: str) -> Callable[[], None]:
        space = getattr(env, f"{kind}_space")
        check = pc.check_action_space if kind == "action" else pc.check_observation_space
        return lambda: (check(space), ec.check_space_limit(space, kind))

    def close_twice() -> None:
        other = make()
        other.close()
        other.close()

    checks = [
        ("action space", spaces("action")),
        ("observation space", spaces("observation")),
        ("reset return type", lambda: ec.check_reset_return_type(env)),
        ("reset seed determinism", lambda: ec.check_reset_seed_determinism(env)),
        ("reset options", lambda: ec.check_reset_options(env)),
        ("reset (passive checker)", lambda: pc.env_reset_passive_checker(env)),
        ("step (passive checker)", lambda: pc.env_step_passive_checker(env, env.action_space.sample())),
        ("step determinism", lambda: ec.check_step_determinism(env)),
        ("returned data not reused", lambda: ec.check_returned_data_not_reused(env)),
    ]
    if env.render_mode is not None:
        checks.append(("render", lambda: (env.reset(seed=0), pc.env_render_passive_checker(env))))
    checks.append(("close twice", close_twice))
    return checks


def _check_gym(address: str, kwargs: Mapping[str, Any]) -> tuple[str, list[Verdict]]:
    from dmrpc_gym.client.env import DmRpcEnv

    env = DmRpcEnv(address, render_mode="rgb_array", **kwargs)
    try:                                  # checked with frames when the world has them
        env.reset(seed=0)
        env.render()
    except ValueError as exc:
        env.close()
        if "render" not in str(exc):
            raise
        env = DmRpcEnv(address, **kwargs)
    render_mode = env.render_mode
    try:
        verdicts = [_run(name, check)
                    for name, check in gym_checks(env, lambda: DmRpcEnv(address, render_mode=render_mode, **kwargs))]
    finally:
        env.close()
    return "gymnasium env", verdicts


def _check_parallel(address: str, agents: list[str], kwargs: Mapping[str, Any], cycles: int) -> tuple[str, list[Verdict]]:
    from pettingzoo.test import parallel_api_test, parallel_seed_test

    from dmrpc_gym.client.parallel import DmRpcParallelEnv
    kwargs = {k: v for k, v in kwargs.items() if k != "join_settings"}

    def make() -> DmRpcParallelEnv:
        return DmRpcParallelEnv(address, agents=agents, **kwargs)

    def api_test() -> None:
        env = make()
        try:
            parallel_api_test(env, num_cycles=cycles)
        finally:
            env.close()

    verdicts = [_run("parallel_api_test", api_test),
                _run("parallel_seed_test", lambda: parallel_seed_test(make, num_cycles=cycles))]
    return f"PettingZoo ParallelEnv ({len(agents)} agents: {', '.join(agents)})", verdicts


def check_world(address: str, *, world_settings: Mapping[str, Any] | None = None,
                world_name: str | None = None, join_settings: Mapping[str, Any] | None = None,
                seed_setting: str | None = AUTO, connect_timeout: float = 5.0,
                step_timeout: float | None = 30.0, cycles: int = 100, tls: Any = None,
                token: str | None = None, compression: str | None = None) -> tuple[str, list[Verdict]]:
    """Check the world at ``address``: ``(what it is, one Verdict per check)``.

    ``tls``, ``token`` and ``compression`` go to every connection (see ``DmRpcEnv``).

    ``seed_setting`` is the Reset setting that carries ``reset(seed=...)`` to the
    server (by default ``"seed"`` on servers built with :mod:`dmrpc_gym.server`, none
    elsewhere; without one the determinism checks will say so).

    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> kind, verdicts = check_world(embedded_server("catch").address)
    >>> kind, sorted({v.status for v in verdicts})
    ('gymnasium env', ['ok'])
    """
    from dmrpc_gym.app.report import inspect_world

    options = dict(tls=tls, token=token, compression=compression)
    report = inspect_world(address, world_settings=world_settings, world_name=world_name,
                           join_settings=join_settings, connect_timeout=connect_timeout, **options)
    kwargs = dict(world_settings=world_settings, world_name=world_name, seed_setting=seed_setting,
                  connect_timeout=connect_timeout, step_timeout=step_timeout, **options)
    if report.agents:
        return _check_parallel(address, [a.name for a in report.agents], kwargs, cycles)
    return _check_gym(address, {**kwargs, "join_settings": join_settings})


def format_verdicts(address: str, kind: str, verdicts: list[Verdict]) -> str:
    """The verdicts, one line each, and a summary line.

    >>> print(format_verdicts("h:1", "gymnasium env", [Verdict("a", "ok"), Verdict("b", "FAIL", "boom")]))
    h:1: gymnasium env
      ok    a
      FAIL  b: boom
    2 checks: 1 ok, 0 with warnings, 1 failed
    """
    lines = [f"{address}: {kind}"]
    for v in verdicts:
        lines.append(f"  {v.status:<4}  {v.name}" + (f": {v.detail}" if v.detail else ""))
    counts = {s: sum(v.status == s for v in verdicts) for s in ("ok", "warn", "FAIL")}
    lines.append(f"{len(verdicts)} checks: {counts['ok']} ok, {counts['warn']} with warnings, "
                 f"{counts['FAIL']} failed")
    return "\n".join(lines)
