"""Create / join / reset settings: ``map<string, Tensor>`` -> Python values, and the ``seed``.

Scalars become Python scalars (``int``, ``float``, ``bool``, ``str``), arrays
stay numpy arrays, so settings can be passed straight to an env factory as
keyword arguments. ``seed`` is special everywhere: it is never passed to the
factory, it seeds ``reset(seed=...)``.

>>> from dmrpc_gym.protocol import tensors
>>> kwargs = unpack_settings({"rows": tensors.pack(np.int32(5)), "seed": tensors.pack(7)}, "world")
>>> pop_seed(kwargs, "world"), kwargs
(7, {'rows': 5})
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.server.serving import status
from dmrpc_gym.protocol.wire import pb

__all__ = ["SEED", "unpack_settings", "pop_seed", "check_seed", "same_settings", "describe", "shown",
           "world_reset_settings"]

#: The setting (and property) that seeds ``reset``.
SEED = "seed"


def unpack_settings(settings: Mapping[str, pb.Tensor], what: str, lists: Any = ()) -> dict[str, Any]:
    """Unpack every setting; ``INVALID_ARGUMENT`` naming the setting when a tensor is malformed.
    ``lists``: the names of settings the client was given as Python lists, given back as lists
    (:func:`~dmrpc_gym.protocol.fidelity.lists_header`)."""
    out: dict[str, Any] = {}
    for name, tensor in settings.items():
        try:
            value = tensors.unpack(tensor)
        except (ValueError, TypeError) as exc:
            raise status.invalid_argument(f"{what} setting {name!r}: {exc}") from None
        if value.ndim == 0:
            value = value.item()
        elif name in lists:
            value = value.tolist()
        out[name] = value
    return out


def check_seed(value: Any, what: str) -> int:
    """``value`` as a seed: a non-negative integer scalar, else ``INVALID_ARGUMENT``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise status.invalid_argument(
            f"{what} {SEED!r} must be a non-negative integer scalar, got {shown(value, 80)}")
    return int(value)


def pop_seed(kwargs: dict[str, Any], what: str) -> int | None:
    """Remove and check the ``seed`` setting; ``None`` when there is none."""
    if SEED not in kwargs:
        return None
    return check_seed(kwargs.pop(SEED), f"{what} setting")


def refuse_unknown(unknown: Any, what: str, where: str, accepted: Any) -> None:
    """``INVALID_ARGUMENT`` naming the ``what`` settings (``"join"``, ``"reset"``...) that ``where``
    does not accept, and those it does; nothing when ``unknown`` is empty.

    >>> refuse_unknown(["speed"], "world", "Catch", ["rows", "seed"])
    Traceback (most recent call last):
    ...
    dmrpc_gym.protocol.errors.DmRpcError: INVALID_ARGUMENT: unknown world setting 'speed' for Catch (accepted: rows, seed)
    """
    unknown = sorted(unknown)
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise status.invalid_argument(
            f"unknown {what} setting{plural} {', '.join(repr(n) for n in unknown)} for {where} "
            f"(accepted: {', '.join(sorted(accepted))})")


def same_settings(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two settings dicts are equal (arrays compared by value)."""
    if a.keys() != b.keys():
        return False
    for key, x in a.items():
        y = b[key]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(np.asarray(x), np.asarray(y)):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def describe(settings: Mapping[str, Any]) -> str:
    """A short rendering of settings for error messages."""
    if not settings:
        return "no settings"
    return ", ".join(f"{k}={shown(v)}" for k, v in settings.items())


def shown(value: Any, width: int = 40) -> str:
    """A peer's setting in a message: its repr, cut to ``width``. An array whose repr raises (numpy's
    repr of an array of empty proto messages does) is shown by its shape and dtype.

    >>> shown(np.arange(3)), shown(np.array([pb.Tensor()], dtype=object))
    ('array([0, 1, 2])', 'an array of shape [1] (object)')
    """
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a message must not fail on what it shows
        return f"an array of shape {list(value.shape)} ({value.dtype})" if isinstance(value, np.ndarray) \
            else f"a {type(value).__name__}"
    return text[:width]


def world_reset_settings(world: Any, settings: Mapping[str, pb.Tensor]) -> tuple[dict[str, Any] | None, int | None]:
    """A ResetWorld's settings for ``world`` (which has ``factory`` and ``kwargs``).

    Returns the new factory keyword arguments when the settings change them
    (else ``None``), and the seed (``None`` when not given).
    """
    kwargs = unpack_settings(settings, "world")
    seed = pop_seed(kwargs, "world")
    if kwargs:
        world.factory.check(kwargs, "world")
        recipe = {**world.kwargs, **kwargs}
        if not same_settings(recipe, world.kwargs):
            return recipe, seed
    return None, seed
