"""What the server builds worlds from: a gymnasium env id, ``"module:attribute"``, or a callable.

A :class:`Factory` knows which keyword arguments its target accepts, so that a
CreateWorld setting nobody would use is refused (``INVALID_ARGUMENT``) instead
of being silently dropped or crashing the factory:

- an env id (``"CartPole-v1"``): the env spec's kwargs, the parameters of its
  entry point, and ``gym.make``'s ``max_episode_steps``;
- a callable (a class, a function, a ``functools.partial``): the parameters of
  its signature; one taking ``**kwargs`` accepts anything, and the factory's
  own error then becomes the ``INVALID_ARGUMENT`` message;
- ``"module:attribute"``: the attribute (a callable, or a PettingZoo env module,
  whose ``parallel_env`` is used); if there is none, an env id registered by
  importing the module (gymnasium's ``"module:EnvId-v0"`` form);
- ``"module"`` that is no env id: a PettingZoo env module (its ``parallel_env``; a
  turn-based game's module, which has none, its ``env``).

A PettingZoo AEC env (what a module's ``env()`` returns) that declares itself
parallelizable (``metadata["is_parallelizable"]``) is served through PettingZoo's
own ``aec_to_parallel``; any other (the ``classic`` games) turn by turn
(:mod:`~dmrpc_gym.server.worlds.aec_world`). Either is said once in the server's log.

``render_mode`` is not a setting: each world's envs are built with the
:class:`Rendering` of the client that made (or, in gym worlds, joined) it. Our
client names its ``render_mode`` (:mod:`dmrpc_gym.protocol.fidelity`) and gets
exactly that, ``None`` included, with frames read on demand; a foreign client
gets the server's default (``render=``: ``rgb_array`` where the target
supports it) and the ``RGB`` observation.

>>> from dmrpc_gym.worlds.catch import Catch
>>> factory = Factory(Catch)
>>> factory.name, factory.kind, sorted(factory.accepted)
('dmrpc_gym.worlds.catch:Catch', 'gym', ['columns', 'rows'])
>>> factory.check({"speed": 2}, "world")
Traceback (most recent call last):
...
dmrpc_gym.protocol.errors.DmRpcError: INVALID_ARGUMENT: unknown world setting 'speed' for dmrpc_gym.worlds.catch:Catch (accepted: columns, rows, seed)
"""
from __future__ import annotations

import functools
import importlib
import logging
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import gymnasium as gym

from dmrpc_gym.protocol.fidelity import NO_RENDER
from dmrpc_gym.server.running import render_threads
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.envs.dm_env_gym import DmEnvGym
from dmrpc_gym.server.envs.dm_env_sources import source as dm_env_source
from dmrpc_gym.server.envs.env_kinds import (RENDER_MODE, class_kind, env_kind, is_env_module, parameters, qualname,
                                        renders_rgb)
from dmrpc_gym.server.worlds.settings import SEED, describe, refuse_unknown

log = logging.getLogger("dmrpc_gym.server")

__all__ = ["Factory", "Rendering", "env_kind", "close_quietly", "KINDS", "RENDER_MODE"]

#: The kinds of env a server can serve.
KINDS = ("gym", "pettingzoo", "dm_env")


def unknown_target(target: str, error: Exception) -> str:
    """Why ``target`` names nothing: no gymnasium env id (gymnasium's ``error`` says why) and, for a
    dotted name, no importable module either (it was tried as one), with close matches.

    >>> unknown_target("CartPol-v1", Exception("No registered env with id: CartPol-v1"))
    "unknown gymnasium env id 'CartPol-v1' (No registered env with id: CartPol-v1); did you mean 'CartPole-v1'?"
    >>> unknown_target("pettingzoo.butterfly.pistonbal_v6", Exception())
    "'pettingzoo.butterfly.pistonbal_v6' is neither a gymnasium env id nor a module that imports (a dotted TARGET is tried as MODULE and MODULE:factory); did you mean 'pettingzoo.butterfly.pistonball_v6'?"
    """
    import difflib
    import pkgutil
    parent = target.rpartition(".")[0] if "/" not in target and ":" not in target else ""
    candidates = list(gym.registry)
    if parent:
        try:
            package = importlib.import_module(parent)
            candidates = [f"{parent}.{m.name}" for m in pkgutil.iter_modules(getattr(package, "__path__", []))]
        except Exception:  # noqa: BLE001 - the parent does not import either: no module to suggest
            candidates = []
    close = difflib.get_close_matches(target, candidates, n=1, cutoff=0.8)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if parent:
        return (f"{target!r} is neither a gymnasium env id nor a module that imports (a dotted TARGET is tried "
                f"as MODULE and MODULE:factory){hint}")
    return f"unknown gymnasium env id {target!r} ({error}){hint}"


@dataclass(frozen=True)
class Rendering:
    """How envs of a world are built to render, part of the world's recipe (key :data:`RENDER_MODE`).

    ``mode``: the ``render_mode`` passed to the factory (None: none is passed, the
    env's default); ``observation``: whether the ``RGB`` observation is offered (to
    foreign clients, which have no other way to ask for frames).

    >>> from dmrpc_gym.worlds.catch import Catch
    >>> Factory(Catch).rendering("none"), Factory(Catch).rendering(None)
    (Rendering(mode=None, observation=False), Rendering(mode='rgb_array', observation=True))
    """

    mode: str | None
    observation: bool = False


class Factory:
    """A resolved env factory: its name, kind, accepted settings, and how to build an env.

    Args:
        target: a gymnasium env id, ``"module:attribute"``, or a callable returning
            a gymnasium ``Env`` or a PettingZoo ``ParallelEnv``.
        kind: ``"gym"``, ``"pettingzoo"`` or None (learned from the first env built).
        render: True to build envs that support it with ``render_mode="rgb_array"``
            (the ``RGB`` observation), False for none, or a render mode to pass as is
            (e.g. ``"human"`` to watch the server's envs).

    Raises ``ValueError`` naming the target when it cannot be resolved (unknown env
    id, missing module or attribute), ``TypeError`` when it is not callable.
    """

    def __init__(self, target: Any, kind: str | None = None, render: bool | str = True):
        if kind not in (None, *KINDS):
            raise ValueError(f"kind must be one of {', '.join(KINDS)} or None, got {kind!r}")
        self.target = target
        self.env_id: str | None = None
        if isinstance(target, str):
            self._resolve_string(target)
        elif callable(target):
            self.name = qualname(target)
            self._make = target
            self._init_callable(target)
        else:
            raise TypeError(f"an env factory must be an env id, 'module:attribute' or a callable, "
                            f"got {type(target).__name__}")
        if kind is not None and self.kind is not None and kind != self.kind:
            raise ValueError(f"{self.name} makes {self.kind} envs, not {kind}")
        self.kind = kind or self.kind
        if render is True:
            self.render_mode = "rgb_array" if self._rgb else None
        elif render is False or render is None:
            self.render_mode = None
        else:
            self.render_mode = str(render)
        #: Why rgb_array rendering failed, once it has (then no RGB observation is offered).
        self.render_failure: str | None = None
        #: The RGB observation's shape by recipe, once probed (:func:`~dmrpc_gym.server.worlds.interface.rgb_shape`).
        self.frame_shapes: dict[str, tuple[int, int, int]] = {}
        self._said_aec = False
        self._said_failures: set[str] = set()
        self._refuses_render_mode = False
        #: The translation losses already logged (:func:`~dmrpc_gym.server.worlds.interface.say_losses`).
        self.losses_said: set[str] = set()

    # -- resolution ------------------------------------------------------------

    def _resolve_string(self, target: str) -> None:
        found = dm_env_source(target)
        if found is not None:
            self.name, self._make, self.accepted = found
            self.kind, self._rgb = "dm_env", True
            return
        module_name, sep, attribute = target.partition(":")
        if not sep and target not in gym.registry and (is_env_module(target) or is_env_module(target, "env")):
            module_name, sep, attribute = target, ":", ""      # a PettingZoo env module (classic ones: env() only)
        if sep:
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:  # noqa: BLE001 - ImportError, or the module's own error on import
                raise ValueError(f"cannot import module {module_name!r} of {target!r}: "
                                 f"{type(exc).__name__}: {exc}") from None
            obj: Any = module
            try:
                for part in filter(None, attribute.split(".")):
                    obj = getattr(obj, part)
            except AttributeError:
                obj = None
            except Exception as exc:  # noqa: BLE001 - a lazy attribute whose import fails (a missing dependency)
                raise ValueError(f"cannot load {attribute!r} from module {module_name!r}: "
                                 f"{type(exc).__name__}: {exc}") from None
            if obj is not None:
                described = obj
                if isinstance(obj, types.ModuleType) and not callable(getattr(obj, "parallel_env", None)) \
                        and callable(getattr(obj, "env", None)):       # a turn-based game's module: its env()
                    described, obj, self.kind = getattr(obj, "raw_env", obj.env), obj.env, None
                elif isinstance(obj, types.ModuleType):
                    if not callable(getattr(obj, "parallel_env", None)):
                        raise ValueError(f"{target!r} is a module without a parallel_env() or env() function")
                    described = getattr(obj, "raw_env", obj.parallel_env)   # PettingZoo's metadata holder
                    obj = obj.parallel_env
                    self.kind = "pettingzoo"
                elif isinstance(module, types.ModuleType) and getattr(module, "raw_env", None) is not None \
                        and attribute in ("env", "parallel_env"):
                    described = module.raw_env
                    self.kind = None                  # learned from the first env (an AEC env() may be either)
                elif not callable(obj):
                    raise ValueError(f"{target!r} is a {type(obj).__name__}, not an env factory")
                else:
                    self.kind = None
                self.name = target
                self._make = obj
                self._init_callable(obj, keep_kind=self.kind is not None, described=described)
                return
            if attribute not in gym.registry:
                raise ValueError(f"module {module_name!r} has no attribute {attribute!r} "
                                 f"and registers no gymnasium env {attribute!r}")
            target = attribute
        try:
            spec = gym.spec(target)
        except gym.error.Error as exc:
            raise ValueError(unknown_target(target, exc)) from None
        self.name = self.env_id = spec.id
        self.kind = "gym"
        creator = spec.entry_point
        if isinstance(creator, str):
            from gymnasium.envs.registration import load_env_creator
            try:
                creator = load_env_creator(creator)
            except Exception as exc:  # noqa: BLE001 - any import failure of the env's module
                raise ValueError(f"cannot load the entry point of {spec.id!r}: {exc}") from None
        names, open_ = parameters(creator) if creator is not None else (frozenset(), True)
        self._rgb = renders_rgb(creator, names, open_)
        names = names | set(spec.kwargs) | {"max_episode_steps"}
        self.accepted = None if open_ else frozenset(names - {RENDER_MODE})
        self._make = functools.partial(gym.make, spec.id)

    def _init_callable(self, fn: Callable, keep_kind: bool = False, described: Any = None) -> None:
        if not keep_kind:
            self.kind = class_kind(fn)
        names, open_ = parameters(fn)
        self._rgb = renders_rgb(fn if described is None else described, names, open_)
        self.accepted = None if open_ else frozenset(names - {RENDER_MODE})

    # -- use ---------------------------------------------------------------------

    def check(self, kwargs: Mapping[str, Any], what: str) -> None:
        """``INVALID_ARGUMENT`` when ``kwargs`` (``seed`` already removed) has a setting the factory does not take."""
        if RENDER_MODE in kwargs:
            raise status.invalid_argument(
                f"{what} setting {RENDER_MODE!r} is not a setting: a dmrpc_gym client's render_mode= "
                f"reaches the server by itself; other clients get render_mode={self.render_mode!r} "
                f"(serve --render) and the RGB observation")
        if self.accepted is None:
            return
        refuse_unknown(set(kwargs) - self.accepted, what, self.name, self.accepted | {SEED})

    def rendering(self, asked: str | None) -> Rendering:
        """The :class:`Rendering` for a client that asked for ``asked`` (:data:`~dmrpc_gym.protocol.fidelity.NO_RENDER`
        for none), or for a foreign client (``asked`` None): the server's default and the ``RGB`` observation."""
        if asked is None:
            return Rendering(self.render_mode, self.render_mode == "rgb_array")
        return Rendering(None if asked == NO_RENDER else asked)

    def make(self, kwargs: Mapping[str, Any], seed: int | None = None) -> tuple[Any, str]:
        """Build one env with ``kwargs`` (a recipe: settings and, under :data:`RENDER_MODE`, its
        :class:`Rendering`; without one, a foreign client's): ``(env, kind)``. A dm_env factory that
        takes ``seed`` (bsuite's) is built with the agent's ``seed``, as its own users build it; so is one of
        any kind that says its envs read the seed when built (``seeded_when_built = True``: a Godot RL
        Agents game's).

        A factory that refuses the settings (``TypeError`` or ``ValueError``: an unknown,
        ill-typed or out-of-range keyword) gives ``INVALID_ARGUMENT``; any other error of the
        factory (or any error with no settings given) is the server's, ``INTERNAL`` with its
        text, and is logged with its traceback once per distinct error. An object that is no
        env, or not of the server's kind, gives ``FAILED_PRECONDITION``.
        """
        kw = dict(kwargs)
        mode = (kw.pop(RENDER_MODE, None) or self.rendering(None)).mode
        if mode is not None and self.kind != "dm_env" and not self._refuses_render_mode:
            kw[RENDER_MODE] = mode
        settings = {k: v for k, v in kwargs.items() if k != RENDER_MODE}
        seeded = seed is not None and self._takes_seed and (self.kind == "dm_env" or self._seeded_when_built)
        if seeded:
            kw[SEED] = seed
        try:
            try:
                env = self._make(**kw)
            except TypeError as exc:   # a **kwargs factory whose env does not take render_mode after all
                if RENDER_MODE not in kw:
                    raise
                del kw[RENDER_MODE]
                env = self._make(**kw)     # (its own error, if render_mode was not the trouble)
                self._refuses_render_mode = True       # not tried again
                self.render_failure = f"{self.name} does not take render_mode ({exc})"
                log.warning("%s: building without render_mode=%r, so it renders nothing: %s",
                            self.name, mode, exc)
        except (TypeError, ValueError) as exc:
            if not settings:                   # nothing the client sent can be wrong
                raise self._failed(settings, exc) from None
            raise status.invalid_argument(
                f"{self.name} could not be created with {describe(settings)}: "
                f"{type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the factory's own failure is the server's
            raise self._failed(settings, exc) from None
        kind = env_kind(env)
        if kind == "aec":
            env, kind = self._parallel(env)
        elif kind == "dm_env":
            env = self._dm_env(env, mode, seed if seeded else None)
        if kind is None or (self.kind is not None and kind != self.kind):
            close_quietly(env)
            got = f"a {kind} env" if kind else f"a {type(env).__name__}"
            want = f"a {self.kind} env" if self.kind else \
                "a gymnasium Env, a PettingZoo ParallelEnv or a dm_env.Environment"
            raise status.failed_precondition(f"{self.name} returned {got}, expected {want}")
        return env, kind

    @functools.cached_property
    def _seeded_when_built(self) -> bool:
        """Whether the factory says its envs read their seed when built (``seeded_when_built = True``: a game
        that takes its seed when it starts), so that a world's env is built with the world's ``seed``."""
        return getattr(self._make, "seeded_when_built", False) is True

    @functools.cached_property
    def _takes_seed(self) -> bool:
        """Whether the factory takes ``seed`` (then a dm_env is built with its agent's seed)."""
        return SEED in parameters(self._make)[0]

    def _failed(self, settings: Mapping[str, Any], exc: BaseException) -> Exception:
        """``INTERNAL`` for a factory that raised; its traceback is logged once per distinct error."""
        said = f"{type(exc).__name__}: {exc}"
        if said not in self._said_failures:
            self._said_failures.add(said)
            log.error("%s could not be created with %s", self.name, describe(settings),
                      exc_info=(type(exc), exc, exc.__traceback__))
        return status.internal(f"{self.name} could not be created with {describe(settings)}: {said}")

    def _dm_env(self, env: Any, mode: str | None, built_seed: int | None) -> Any:
        """A dm_env as the gymnasium Env that gym worlds serve; it renders ``rgb_array`` when dm_control can."""
        try:
            return DmEnvGym(env, mode, self.name, built_seed)
        except (TypeError, ValueError) as exc:
            close_quietly(env)
            raise status.failed_precondition(f"{self.name} cannot be served: {exc}") from None

    def _parallel(self, env: Any) -> tuple[Any, str]:
        """A parallelizable AEC env as a ParallelEnv, through PettingZoo's ``aec_to_parallel``; any
        other as it is, to be served turn by turn: ``(env, kind)``, said once."""
        from pettingzoo.utils.conversions import aec_to_parallel
        parallel = bool((getattr(env, "metadata", None) or {}).get("is_parallelizable", False))
        if not self._said_aec:
            self._said_aec = True
            log.info("%s returns a PettingZoo AEC env: %s", self.name,
                     "serving it through pettingzoo's aec_to_parallel (every agent acts in each round)"
                     if parallel else "not parallelizable, so served turn by turn (each agent's step is "
                     "answered at its turn)")
        if not parallel:
            return env, "aec"
        try:
            return aec_to_parallel(env), "pettingzoo"
        except Exception as exc:  # noqa: BLE001 - PettingZoo's reason is the answer
            close_quietly(env)
            raise status.failed_precondition(
                f"{self.name} returns a PettingZoo AEC env that aec_to_parallel cannot convert "
                f"({type(exc).__name__}: {exc}); serve its parallel_env() instead") from None

    def __repr__(self) -> str:
        return f"Factory({self.name!r}, kind={self.kind!r})"


def close_quietly(env: Any) -> None:
    """``env.close()``, ignoring its errors (closing is best effort); its render thread stops."""
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass
    render_threads.release(env)
