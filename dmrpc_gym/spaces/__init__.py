"""TensorSpec <-> gymnasium space, both directions, and values between the two forms.

Three modules: :mod:`~dmrpc_gym.spaces.from_spec` (spec -> space),
:mod:`~dmrpc_gym.spaces.codec` (space -> specs, values <-> wire arrays) and
:mod:`~dmrpc_gym.spaces.text` (:class:`PrintableText`).

From a spec (client side), the space admits exactly the values the spec
admits, with the spec's dtype:

- numeric with finite bounds (broadcast or per-element): ``Box(low, high, shape, dtype)``;
- integer scalar with both bounds: ``Discrete(max - min + 1, start=min, dtype=dtype)``;
- integer array with both bounds: ``MultiDiscrete(max - min + 1, start=min, dtype=dtype)``;
  when a count ``max - min + 1`` does not fit the dtype (``uint8`` in ``[0, 255]``,
  a full-range ``int64``), gymnasium cannot hold it and the same values are
  given as a ``Box(min, max)`` of the dtype;
- ``uint8`` images (``H x W x C`` with C in 1, 3, 4): ``Box`` over the bounds (default ``[0, 255]``);
- numeric without bounds (or with one): ``Box`` over the dtype's range (±inf
  for floats, ``iinfo`` for integers), keeping a bound that is given;
- bool: ``MultiBinary(shape)`` (``MultiBinary(n)`` for a vector); a bool scalar: ``Discrete(2)``;
- string scalar: :class:`PrintableText`; a -1 dimension, PROTO, string arrays:
  :class:`UnsupportedSpec`.

From a space (server side), :func:`specs_from_space` names one spec per leaf
(``Dict`` keys and ``Tuple`` indices joined by dots: ``pos.x``, ``pair.0``).
Round trip ``space_from_spec(specs_from_space(S))`` gives the same space except:
an integer ``Box`` with small enough bounds comes back as ``Discrete`` /
``MultiDiscrete`` (same values); float16 / int16 / uint16 widen to float32 /
int32 / uint32 (:func:`unflatten_value` narrows values back); a ``Box`` of
bools comes back as ``MultiBinary``; ``Text`` comes back as
:class:`PrintableText` (a TensorSpec carries no length or charset); ``Dict`` /
``Tuple`` come back as one space per dotted name (:func:`dict_space` rebuilds
the nesting).

>>> import gymnasium as gym
>>> specs = specs_from_space(gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "n": gym.spaces.Discrete(3)}))
>>> {name: space_from_spec(spec) for name, spec in specs.items()}
{'n': Discrete(3), 'pos': Box(-1.0, 1.0, (2,), float32)}
"""
from __future__ import annotations
from dmrpc_gym.spaces.codec import ValueCodec, flatten_value, specs_from_space, unflatten_value, value_codec
from dmrpc_gym.spaces.from_spec import UnsupportedSpec, dict_space, space_from_spec
from dmrpc_gym.spaces.text import TEXT_MAX_LENGTH, PrintableText

__all__ = [
    "UnsupportedSpec", "PrintableText", "TEXT_MAX_LENGTH",
    "space_from_spec", "specs_from_space", "dict_space",
    "ValueCodec", "value_codec", "flatten_value", "unflatten_value",
]
