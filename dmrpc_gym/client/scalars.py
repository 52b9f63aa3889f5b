"""Reward and discount as a client reads them: from an observation, a callable, or a constant."""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Callable, Sequence, Union

import numpy as np

__all__ = ["RewardFn", "Scalar"]

#: An observation name, a callable ``(obs, state[, agent]) -> float``, or ``None``.
RewardFn = Union[str, Callable[..., float], None]


def _arity(fn: Callable) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 3
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


class Scalar:
    """Reward or discount: from an observation, a callable, or a constant.

    ``source``: an observation name (the default name ``kind`` may be missing: then
    ``default``), a callable ``(observations, state[, agent])``, or None (``default``).

    >>> reward = Scalar("reward", "reward", 0.0, ["reward", "board"], agent=None)
    >>> reward({"reward": np.array(1.5)}, 1), Scalar(None, "discount", 1.0, [], None)({}, 1)
    (1.5, 1.0)
    """

    def __init__(self, source: RewardFn, kind: str, default: float, available: Sequence[str],
                 agent: str | None):
        self.kind, self.default, self.agent = kind, default, agent
        self.name = self.fn = None
        if callable(source):
            self.fn = source
            self.with_agent = agent is not None and _arity(source) >= 3
        elif isinstance(source, str):
            if source in available:
                self.name = source
            elif source != kind:   # a name the caller chose explicitly must exist
                raise ValueError(f"{kind}={source!r} names no observation; the server offers {sorted(available)}")
        elif source is not None:
            raise TypeError(f"{kind} must be an observation name, a callable or None, not {source!r}")

    def __call__(self, observations: Mapping[str, np.ndarray], state: int) -> float:
        if self.fn is not None:
            args = (observations, state, self.agent) if self.with_agent else (observations, state)
            return float(self.fn(*args))
        if self.name is None:
            return self.default
        value = observations.get(self.name)
        if value is None:
            return self.default
        if value.size != 1:
            raise ValueError(f"{self.kind} observation {self.name!r} has {value.size} elements; expected one")
        return float(value.item())         # (its one element, whatever its shape: no reshaped view made first)
