"""What our own client and server say to each other so that a served env is the local env.

dm_env_rpc carries tensors by spec; it has no ``render_mode``, no Tuple, no
16-bit dtypes and no way to ask for a frame without stepping. Between a
dmrpc_gym client and a dmrpc_gym server these travel by paths that foreign
peers never meet:

- the client names the world settings it was given as Python lists in a request header,
  :data:`LISTS_METADATA`, and a server gives the env those as lists (not arrays);
- the client names the ``render_mode`` it wants in a request header,
  :data:`RENDER_METADATA` (:data:`NO_RENDER` for none); a server builds the envs
  of that stream's worlds with it. A foreign client sends no such header and
  gets the server's default (``serve --render``).
- what a step returned that dm_env_rpc cannot say (a reward that is no Python
  float, ``truncated`` when ``terminated`` is set too, scalars held as numpy
  scalars or Python numbers) travels, when asked for, as
  the observation :data:`EXACT_UID` that no spec lists (JSON, as ``info``), only on
  the steps that need it (:func:`exact_step`);
- a server that offers :data:`FIDELITY_FEATURE` (in its response headers) gives
  every joined agent two properties: :data:`SPACES_PROPERTY`, the exact spaces
  (and a dm_env's specs) as text (:mod:`dmrpc_gym.spaces.described`), and
  :data:`FRAME_PROPERTY`, the env's ``render()`` of its current state, made
  only when read; the description holds, under :data:`ENV_KEY`, what the env says of
  itself (its ``metadata``, ``spec.max_episode_steps``, a parallel env's ``rewards``
  container and the agents that share a space object).

>>> FIDELITY_FEATURE, RENDER_METADATA
('fidelity', 'dmrpc-gym-render-mode')
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dmrpc_gym.protocol.info import INFO_UID

__all__ = ["FIDELITY_FEATURE", "RENDER_METADATA", "NO_RENDER", "SPACES_PROPERTY", "FRAME_PROPERTY", "EXACT_UID",
           "render_header", "lists_header", "listed_settings", "LISTS_METADATA", "exact_step", "exact_reward", "scalar_kind", "ENV_KEY"]

#: The feature a dmrpc_gym server lists when it offers the two properties below.
FIDELITY_FEATURE = "fidelity"
#: The request header (gRPC metadata) in which our client names its render_mode.
RENDER_METADATA = "dmrpc-gym-render-mode"
#: Its value for ``render_mode=None``.
NO_RENDER = "none"
#: The request header in which our client names the world settings it was given as Python lists
#: (JSON, a list of names): dm_env_rpc carries them as tensors, which a server unpacks as arrays;
#: a dmrpc_gym server gives the env those settings as lists again (:func:`lists_header`).
LISTS_METADATA = "dmrpc-gym-lists"
#: The agent property holding the exact spaces (and dm_env specs) as text.
SPACES_PROPERTY = "spaces"
#: The agent property whose read renders the current state (uint8, H x W x C).
FRAME_PROPERTY = "frame"
#: The key of the ``spaces`` description under which a server says what the env says of itself
#: (:func:`dmrpc_gym.server.worlds.env_facts.env_facts`): its metadata, ``max_episode_steps``, a
#: parallel env's ``rewards`` container and the agents that share one space object.
ENV_KEY = "env"
#: The observation UID of a step's exact extras (beside ``info``'s and a turn's; no spec lists it).
EXACT_UID = INFO_UID - 2


def render_header(render_mode: str | None) -> tuple[str, str]:
    """The request header naming ``render_mode`` (None: :data:`NO_RENDER`).

    >>> render_header(None), render_header("rgb_array")
    (('dmrpc-gym-render-mode', 'none'), ('dmrpc-gym-render-mode', 'rgb_array'))
    """
    return RENDER_METADATA, NO_RENDER if render_mode is None else render_mode


def scalar_kind(value: Any) -> str | None:
    """How a scalar is held, for :func:`exact_reward`: None for a Python float, else its numpy dtype
    or Python type name.

    >>> scalar_kind(1.0), scalar_kind(np.float64(1)), scalar_kind(1)
    (None, '<f8', 'int')
    """
    kind = type(value)
    if kind is float:
        return None
    return value.dtype.str if isinstance(value, np.generic) else kind.__name__


def lists_header(settings: Any) -> tuple[tuple[str, str], ...]:
    """The request header naming the ``settings`` given as Python lists (none when there are none).

    >>> lists_header({"desc": ["SFFF", "FHFH"], "is_slippery": False}), lists_header(None)
    ((('dmrpc-gym-lists', '["desc"]'),), ())
    """
    import json
    names = [str(k) for k, v in (settings or {}).items() if isinstance(v, list)]
    return ((LISTS_METADATA, json.dumps(names)),) if names else ()


def listed_settings(header: str | None) -> frozenset[str]:
    """The setting names a :func:`lists_header` value lists (none for a missing or malformed one).

    >>> sorted(listed_settings('["desc"]')), listed_settings("not json")
    (['desc'], frozenset())
    """
    import json
    try:
        names = json.loads(header) if header else []
    except ValueError:
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()


def exact_step(reward: Any, terminated: bool, truncated: bool,
               kinds: dict[str, str] | None = None, discount: Any = 1.0) -> dict[str, Any] | None:
    """What dm_env_rpc cannot say of a step: the type of a reward (or of a dm_env's ``discount``)
    that is no Python float (its value travels as the DOUBLE ``reward``), ``truncated`` when
    ``terminated`` is set too, and how the observation holds its scalars, where not as the codec does
    (``kinds``, :class:`~dmrpc_gym.spaces.scalars.ScalarKinds`).

    >>> exact_step(1.0, False, False), exact_step(np.float32(1), True, True), exact_step(2, False, False)
    (None, {'reward': '<f4', 'truncated': True}, {'reward': 'int'})
    >>> exact_step(1.0, False, False, discount=np.float32(1))
    {'discount': '<f4'}
    """
    exact = None
    kind = scalar_kind(reward)
    if kind is not None:
        exact = {"reward": kind}
    kind = scalar_kind(discount)
    if kind is not None:
        exact = {**(exact or {}), "discount": kind}
    if terminated and truncated:
        exact = {**(exact or {}), "truncated": True}
    if kinds:
        exact = {**(exact or {}), "kinds": kinds}
    return exact


def exact_reward(value: float, kind: str) -> Any:
    """The reward ``value`` as the type :func:`exact_step` named (a float for a type it does not know).

    >>> exact_reward(2.0, "int"), exact_reward(0.5, "<f4")
    (2, np.float32(0.5))
    """
    if kind in ("int", "bool"):
        return int(value) if kind == "int" else bool(value)
    try:
        return np.dtype(kind).type(value)
    except TypeError:
        return value
