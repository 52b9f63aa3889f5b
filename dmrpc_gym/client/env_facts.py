"""The client's half of :mod:`dmrpc_gym.server.worlds.env_facts`: what a dmrpc_gym server says of the env it
serves (its metadata, ``max_episode_steps``, a parallel env's rewards container and shared space
objects) made the client env's own, so that the ecosystem's checkers see the local env. From any other
server nothing of this is known, and the metadata say so (``unknown``)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["served_metadata", "parallel_metadata", "with_steps", "share_spaces"]


def served_metadata(facts: Mapping[str, Any] | None) -> dict[str, Any]:
    """A DmRpcEnv's ``metadata``: the served env's own (``facts``, from a dmrpc_gym server), its
    ``render_modes`` those that work through the bridge (``rgb_array``, and ``human``, shown here from
    its frames, when the env renders ``rgb_array``). From another server nothing is known of the env:
    both modes (frames from a render observation), no ``render_fps``, and ``unknown`` says so.

    >>> served_metadata({"metadata": {"render_modes": ["human", "ansi", "rgb_array"], "render_fps": 4}})
    {'render_modes': ['human', 'rgb_array'], 'render_fps': 4}
    >>> served_metadata(None)
    {'render_modes': ['rgb_array', 'human'], 'unknown': ['render_fps', 'max_episode_steps']}
    """
    if facts is None:
        return {"render_modes": ["rgb_array", "human"], "unknown": ["render_fps", "max_episode_steps"]}
    metadata = dict(facts.get("metadata") or {})
    served = list(metadata.get("render_modes") or [])
    modes = [m for m in served if m in ("human", "rgb_array")] if "rgb_array" in served else []
    if modes and "human" not in modes:
        modes.append("human")
    return {**metadata, "render_modes": modes}


def parallel_metadata(facts: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """A PettingZoo client env's ``metadata``: ``own`` (the client class's) updated with the served env's,
    ``render_modes`` those that work through the bridge (``rgb_array``); from another server (no
    ``facts``), ``own`` and what is unknown (the env's ``render_fps``, and its rewards container: a dict).

    >>> parallel_metadata({"metadata": {"name": "pistonball_v6", "render_modes": ["human", "rgb_array"]}}, {})
    {'name': 'pistonball_v6', 'render_modes': ['rgb_array']}
    >>> parallel_metadata({}, {"render_modes": ["rgb_array"]})
    {'render_modes': ['rgb_array'], 'unknown': ['render_fps', 'rewards']}
    """
    if not facts:
        return {**own, "unknown": ["render_fps", "rewards"]}
    served = dict(facts.get("metadata") or {})
    return {**own, **served, "render_modes": ["rgb_array"] if "rgb_array" in (served.get("render_modes") or []) else []}


def with_steps(spec: Any, steps: int | None) -> Any:
    """gymnasium's ``spec`` with ``max_episode_steps=steps`` where it gives none (None stays None)."""
    if spec is not None and spec.max_episode_steps is None and steps is not None:
        return dataclasses.replace(spec, max_episode_steps=steps)
    return spec


def share_spaces(facts: Mapping[str, Any], observations: MutableMapping[str, Any],
                 actions: MutableMapping[str, Any]) -> None:
    """Make the agents whose spaces are one object in the served env (``facts["shared"]``) share one here.

    >>> actions = {"a": object(), "b": object()}
    >>> share_spaces({"shared": {"actions": [["a", "b"]]}}, {}, actions); actions["a"] is actions["b"]
    True
    """
    for key, spaces in (("observations", observations), ("actions", actions)):
        for group in (facts.get("shared") or {}).get(key, []):
            for name in group[1:]:
                if name in spaces and group[0] in spaces:
                    spaces[name] = spaces[group[0]]
