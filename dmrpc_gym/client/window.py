"""``render_mode="human"`` on the client: the served env's ``rgb_array`` frames shown in a window of
the client's own (pygame), at the env's ``render_fps``, as gymnasium's ``HumanRendering`` shows them.

The server never opens a window: the frame of the current state is rendered there (``rgb_array``)
and shown here, so a human-mode env works the same on a headless server.

>>> window = FrameWindow(fps=None)
>>> window.closed
True
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["FrameWindow"]


class FrameWindow:
    """A window that shows uint8 ``H x W x 3`` frames, opened at the first frame, ticking at ``fps``
    (None: as fast as frames come). ``ImportError`` naming pygame when it is not installed."""

    def __init__(self, fps: float | None):
        self.fps = fps
        self._screen: Any = None
        self._clock: Any = None

    @property
    def closed(self) -> bool:
        return self._screen is None

    def show(self, frame: np.ndarray) -> None:
        """Show ``frame`` (the window opens, or takes its size, at the first one)."""
        try:
            os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
            import pygame
        except ImportError:
            raise ImportError('render_mode="human" shows the served env\'s frames with pygame: '
                              "pip install pygame") from None
        frame = np.asarray(frame)
        size = (frame.shape[1], frame.shape[0])
        if self._screen is None:
            pygame.init()
            pygame.display.init()
            self._screen = pygame.display.set_mode(size)
            self._clock = pygame.time.Clock()
        pygame.event.pump()
        surface = pygame.surfarray.make_surface(np.transpose(frame[:, :, :3], (1, 0, 2)))
        self._screen.blit(surface, (0, 0))
        pygame.display.flip()
        if self.fps:
            self._clock.tick(self.fps)

    def close(self) -> None:
        """Close the window (nothing when none is open)."""
        if self._screen is not None:
            import pygame
            pygame.display.quit()
            self._screen = self._clock = None
