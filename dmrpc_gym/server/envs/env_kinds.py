"""What kind of env an object, a class or a factory is, and what a factory takes: the questions a
:class:`~dmrpc_gym.server.envs.factories.Factory` asks of its target before it builds anything.

>>> from dmrpc_gym.worlds.catch import Catch
>>> class_kind(Catch), env_kind(Catch()), sorted(parameters(Catch)[0])
('gym', 'gym', ['columns', 'render_mode', 'rows'])
"""
from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Callable

import gymnasium as gym

from dmrpc_gym.server.envs.dm_env_gym import is_dm_env

__all__ = ["RENDER_MODE", "env_kind", "is_aec", "is_env_module", "class_kind", "parameters", "renders_rgb", "qualname"]

#: The keyword a factory takes its ``render_mode`` by; the server keeps it for itself (a recipe's
#: :class:`~dmrpc_gym.server.envs.factories.Rendering` is under it).
RENDER_MODE = "render_mode"


def is_aec(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo AEC env (one agent acts at a time; its ``agent_selection``
    may not exist before the first reset, so the AEC methods are what is looked at)."""
    try:
        from pettingzoo.utils.env import AECEnv
    except ImportError:  # pragma: no cover - pettingzoo is a dependency
        AECEnv = ()
    return isinstance(env, AECEnv) or (callable(getattr(env, "agent_iter", None))
                                       and callable(getattr(env, "last", None)))


def env_kind(env: Any) -> str | None:
    """``"gym"`` for a gymnasium Env, ``"pettingzoo"`` for a PettingZoo ParallelEnv, ``"aec"`` for
    a PettingZoo AEC env (converted when parallelizable, else served turn by turn), ``"dm_env"`` for
    a ``dm_env.Environment``, else None."""
    if isinstance(env, gym.Env):
        return "gym"
    if is_dm_env(env):
        return "dm_env"
    if is_aec(env):
        return "aec"
    try:
        from pettingzoo.utils.env import ParallelEnv
    except ImportError:  # pragma: no cover - pettingzoo is a dependency
        ParallelEnv = ()
    if isinstance(env, ParallelEnv) or (
            hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))
            and callable(getattr(env, "action_space", None)) and hasattr(env, "step")
            and not hasattr(env, "agent_selection")):
        return "pettingzoo"
    return None


def is_env_module(name: str, maker: str = "parallel_env") -> bool:
    """Whether ``name`` imports as a module with a ``parallel_env`` (or ``maker``: a PettingZoo env module)."""
    try:
        return callable(getattr(importlib.import_module(name), maker, None))
    except Exception:  # noqa: BLE001 - not such a module: the name is then an env id (or an error)
        return False


def class_kind(target: Any) -> str | None:
    if not isinstance(target, type):
        return None
    if issubclass(target, gym.Env):
        return "gym"
    if is_dm_env(target):
        return "dm_env"
    try:
        from pettingzoo.utils.env import ParallelEnv
        if issubclass(target, ParallelEnv):
            return "pettingzoo"
    except ImportError:  # pragma: no cover
        pass
    return None


def parameters(fn: Callable) -> tuple[frozenset[str], bool]:
    """The keyword parameters of ``fn`` and whether it takes ``**kwargs`` (True when unknowable)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return frozenset(), True
    names, open_ = set(), False
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            open_ = True
        elif param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            names.add(param.name)
    return frozenset(names), open_


def renders_rgb(target: Any, names: frozenset[str], open_: bool) -> bool:
    """Whether to build with ``render_mode="rgb_array"``: the target takes it (by name, or through
    ``**kwargs``, PettingZoo's ``env(render_mode=...)`` convention) and, if it says, supports it."""
    if RENDER_MODE not in names and not open_:
        return False
    modes = (getattr(target, "metadata", None) or {}).get("render_modes")
    return modes is None or "rgb_array" in modes


def qualname(target: Any) -> str:
    if isinstance(target, functools.partial):
        return f"partial({qualname(target.func)})"
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    return f"{module}:{name}" if module else name
