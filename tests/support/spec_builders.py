"""TensorSpecs built by hand for the spec and space tests."""
from __future__ import annotations

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.wire import pb

__all__ = ["make_spec"]


def make_spec(name, dtype, shape=(), min=None, max=None, bound_dtype=None):
    """A TensorSpec; bounds are written in ``bound_dtype`` (default: the spec's dtype)."""
    spec = pb.TensorSpec(name=name, dtype=dtype, shape=list(shape))
    for field, bound in (("min", min), ("max", max)):
        if bound is not None:
            bdt = bound_dtype or dtype
            tensors.pack_flat_into(getattr(spec, field), np.asarray(bound).ravel(), bdt)
    return spec
