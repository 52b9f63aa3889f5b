"""Large copies cut into parts copied at once: the same bytes as one ``np.copyto``, whatever the size."""
from __future__ import annotations

import numpy as np
import pytest

from dmrpc_gym.transport import array_copies
from dmrpc_gym.transport.array_copies import PARALLEL_AT, copied, copy_into, parts


@pytest.mark.parametrize("extra", [0, 1, 63, 64, 4097])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64, np.bool_])
def test_parts_copy_every_byte(extra, dtype, monkeypatch):
    monkeypatch.setattr(array_copies, "WORKERS", 2)      # three parts, whatever this machine's cores
    rng = np.random.default_rng(extra)
    count = (PARALLEL_AT + extra) // np.dtype(dtype).itemsize + 1
    src = rng.integers(0, 2 if dtype is np.bool_ else 250, count).astype(dtype)
    assert parts(src.nbytes) == 3
    dst = np.zeros_like(src)
    copy_into(dst, src)
    assert dst.tobytes() == src.tobytes()
    out = copied(src.reshape(1, -1))
    assert out.shape == (1, count) and out.dtype == src.dtype and out.flags.owndata and out.tobytes() == src.tobytes()


def test_small_and_strided_copies_are_one_copyto(monkeypatch):
    monkeypatch.setattr(array_copies, "WORKERS", 2)
    assert parts(PARALLEL_AT - 1) == 1
    src = np.arange(2 * PARALLEL_AT, dtype=np.uint8)[::2]       # not C-contiguous: one np.copyto
    dst = np.empty_like(src)
    copy_into(dst, src)
    assert (dst == src).all()
    with pytest.raises(ValueError):                               # what np.copyto says of a shape that cannot be
        copy_into(np.empty(3, np.uint8), np.empty(PARALLEL_AT, np.uint8))


def test_no_workers_means_one_part(monkeypatch):
    monkeypatch.setattr(array_copies, "WORKERS", 0)
    assert parts(16 * PARALLEL_AT) == 1
