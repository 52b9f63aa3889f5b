"""dm_env sources named by a string: ``dm_control/DOMAIN-TASK`` and ``bsuite/ID``.

Each gives ``(name, factory, accepted settings)``. dm_control's factory routes
the world settings to ``suite.load``: the task function's own parameters
(``random``, and ``time_limit`` for most tasks) to ``task_kwargs``, and
``time_limit`` (when the task does not take it) / ``control_timestep`` /
``n_sub_steps`` / ``flat_observation`` to ``environment_kwargs``. bsuite's id is its only setting (none accepted);
a world's seed builds a bsuite env as ``bsuite.load(experiment, {..., "seed": seed})`` does.
An unknown domain, task or id is a ``ValueError`` naming what is available.

>>> source("CartPole-v1") is None
True
"""
from __future__ import annotations

import inspect
import os
from typing import Any, Callable

__all__ = ["source", "DM_CONTROL", "BSUITE", "DM_CONTROL_TASK_SETTINGS", "DM_CONTROL_ENV_SETTINGS"]

DM_CONTROL, BSUITE = "dm_control/", "bsuite/"
#: World settings every dm_control task takes in ``task_kwargs``, and those for ``environment_kwargs``.
DM_CONTROL_TASK_SETTINGS = frozenset({"random"})
DM_CONTROL_ENV_SETTINGS = frozenset({"time_limit", "control_timestep", "n_sub_steps", "flat_observation"})


def _import(package: str, extra: str) -> Any:
    try:
        return __import__(package, fromlist=["_"])
    except ImportError as exc:
        from dmrpc_gym._extras import install_hint
        raise ValueError(f"{package} is not installed ({exc}); {install_hint(extra)}") from None


def _dm_control(name: str) -> tuple[str, Callable[..., Any], frozenset[str]]:
    os.environ.setdefault("MUJOCO_GL", "egl")   # headless rendering
    suite = _import("dm_control.suite", "dm_control")
    domain, sep, task = name.partition("-")
    tasks: dict[str, list[str]] = {}
    for d, t in suite.ALL_TASKS:
        tasks.setdefault(d, []).append(t)
    if domain not in tasks:
        raise ValueError(f"dm_control has no domain {domain!r} (domains: {', '.join(sorted(tasks))})")
    if not sep or task not in tasks[domain]:
        raise ValueError(f"dm_control domain {domain!r} has no task {task!r} "
                         f"(tasks: {', '.join(tasks[domain])}); name one as dm_control/{domain}-TASK")

    parameters = inspect.signature(getattr(suite, domain).SUITE[task]).parameters
    task_settings = (DM_CONTROL_TASK_SETTINGS | set(parameters)) - {"environment_kwargs"}

    def load(**settings: Any) -> Any:
        task_kwargs = {k: v for k, v in settings.items() if k in task_settings}
        env_kwargs = {k: v for k, v in settings.items() if k not in task_settings}
        return suite.load(domain, task, task_kwargs=task_kwargs, environment_kwargs=env_kwargs)

    return f"{DM_CONTROL}{domain}-{task}", load, frozenset(task_settings | DM_CONTROL_ENV_SETTINGS)


def _bsuite(bsuite_id: str) -> tuple[str, Callable[..., Any], frozenset[str]]:
    bsuite = _import("bsuite", "bsuite")
    sweep = _import("bsuite.sweep", "bsuite")
    if bsuite_id not in sweep.SWEEP:
        experiments = sorted({key.split("/")[0] for key in sweep.SWEEP})
        raise ValueError(f"bsuite has no id {bsuite_id!r}: ids are EXPERIMENT/NUMBER, e.g. catch/0 "
                         f"(experiments: {', '.join(experiments)})")
    experiment = bsuite_id.split("/")[0]

    def load(seed: int | None = None) -> Any:
        """The id's env; with ``seed`` (a world's), built with it as ``bsuite.load`` builds it."""
        if seed is None:
            return bsuite.load_from_id(bsuite_id)
        return bsuite.load(experiment, {**sweep.SETTINGS[bsuite_id], "seed": seed})

    return f"{BSUITE}{bsuite_id}", load, frozenset()


def source(target: str) -> tuple[str, Callable[..., Any], frozenset[str]] | None:
    """``(name, factory, accepted settings)`` for a dm_control or bsuite name, else None."""
    if target.startswith(DM_CONTROL):
        return _dm_control(target[len(DM_CONTROL):])
    if target.startswith(BSUITE):
        return _bsuite(target[len(BSUITE):])
    return None
