"""Frames on the server: which envs render, the RGB observation's shape, and the frame of the current state.

Every frame is rendered on the env's own render thread (:mod:`~dmrpc_gym.server.running.render_threads`).
The ``RGB`` observation is offered to foreign clients only (a recipe's
:class:`~dmrpc_gym.server.envs.factories.Rendering` says so); our client reads
:func:`current_frame` through the ``frame`` property instead (:mod:`dmrpc_gym.protocol.fidelity`).

>>> class Still:
...     render_mode = "rgb_array"
...     def render(self):
...         return np.zeros((2, 3, 3), np.uint8)
>>> probe_rgb(rgb_render(Still()))
(2, 3, 3)
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Mapping

import numpy as np

from dmrpc_gym.server.running import render_threads
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.envs.factories import RENDER_MODE, close_quietly
from dmrpc_gym.server.worlds.settings import describe
from dmrpc_gym.server.running.workers import Lane

__all__ = ["rgb_render", "rgb_shape", "probe_rgb", "current_frame"]

log = logging.getLogger("dmrpc_gym.server")


def rgb_render(env: Any) -> Callable[[], Any] | None:
    """The env's ``render`` (on its own render thread, :mod:`~dmrpc_gym.server.running.render_threads`) when it
    renders ``rgb_array`` frames, else None."""
    return functools.partial(render_threads.render, env) if getattr(env, "render_mode", None) == "rgb_array" else None


def rgb_shape(factory: Any, env: Any, recipe: Mapping[str, Any], seed: int | None) -> tuple[int, int, int] | None:
    """The ``RGB`` observation's shape, when ``recipe``'s :class:`~dmrpc_gym.server.envs.factories.Rendering`
    offers it (a foreign client's world) and ``env`` renders ``rgb_array``; else None.

    A shape needs a frame, and a frame needs a reset: it is probed on an instance of
    its own, built from the same recipe and closed after (once per recipe), so that the
    envs clients step are never reset, stepped or rendered on the server's account.
    An env that knows its frame size says it (``frame_shape``). A failed render is
    logged once per factory (``factory.render_failure``) and the observation left out.
    """
    rendering = recipe.get(RENDER_MODE)
    if rendering is None or not rendering.observation or rgb_render(env) is None \
            or factory.render_failure is not None:
        return None
    known = getattr(env, "frame_shape", None)
    if known is not None:
        return tuple(known)
    key = describe(recipe) + f", seed={seed}"
    shape = factory.frame_shapes.get(key)
    if shape is not None:
        return shape
    probe, _ = factory.make(recipe)
    try:
        probe.reset(seed=seed)
        shape = factory.frame_shapes[key] = probe_rgb(probe.render)
        return shape
    except Exception as exc:  # noqa: BLE001 - rendering is optional
        factory.render_failure = f"{type(exc).__name__}: {exc}"
        log.warning("%s: no RGB observation, rendering failed: %s", factory.name, factory.render_failure)
        return None
    finally:
        close_quietly(probe)


def probe_rgb(render: Callable[[], Any]) -> tuple[int, int, int]:
    """Render once and return the ``RGB`` shape ``(H, W, 3)``; ``ValueError`` when it is no image."""
    frame = np.asarray(render())
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] not in (3, 4):
        raise ValueError(f"render() returned {frame.dtype} {frame.shape}, not a uint8 HxWx3 image")
    return (frame.shape[0], frame.shape[1], 3)


async def current_frame(env: Any, lane: Lane, who: str, why: str | None = None) -> np.ndarray:
    """``env.render()`` of its current state, on its ``lane``: the :data:`FRAME_PROPERTY`'s value.

    ``FAILED_PRECONDITION`` when the env was not built to render ``rgb_array`` (``why``: the
    factory's reason, when it refused the mode), ``INTERNAL`` with the env's reason when
    rendering fails (a missing pygame, say).
    """
    mode = getattr(env, "render_mode", None)
    if mode != "rgb_array":
        raise status.failed_precondition(
            f"{who} was built with render_mode={mode!r}, so it has no frames"
            + (f" ({why})" if why else ": make the env with render_mode='rgb_array'"))
    try:
        frame = await lane.call(render_threads.render, env)
    except Exception as exc:  # noqa: BLE001 - the env's error is the answer
        raise status.internal(f"{who}: render() raised {type(exc).__name__}: {exc}") from None
    frame = np.asarray(frame)
    if frame.dtype != np.uint8 or frame.ndim != 3:
        raise status.failed_precondition(f"{who}: render() returned {frame.dtype} {frame.shape}, not a uint8 HxWxC image")
    return frame
