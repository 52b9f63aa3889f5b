"""Copies of large arrays spread over the cores that would otherwise wait.

A large tensor through shared memory costs one copy at each end (into the region, out of it into
an array the user owns), and while one end copies the other waits for it: one core works, the
others idle. :func:`copy_into` and :func:`copied` cut a copy of :data:`PARALLEL_AT` bytes or more
into as many contiguous byte ranges as there are workers plus the caller, and copy them at once
(``numpy`` lets go of the GIL while it copies); smaller copies, and arrays that are not C-contiguous,
are one ``np.copyto`` as before. The values are the same bytes either way: only the wall-clock time
changes (``benchmarks/bench_host.py``'s 16 MB rows; the CPU time is the same copy's).

>>> src = np.arange(PARALLEL_AT // 4 + 3, dtype=np.float32)
>>> out = copied(src)
>>> bool((out == src).all()), out.flags.owndata, out is src
(True, True, False)
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["PARALLEL_AT", "copy_into", "copied", "parts"]

#: Copies of this many bytes or more are cut into parts copied at once (measured on a 2-vCPU VM: a
#: 16 MiB copy 0.45 -> 0.30 ms with one worker; below ~1 MiB handing a part to a thread costs more
#: than it saves).
PARALLEL_AT = 4 << 20
#: Worker threads (the caller copies a part too): one less than the cores this process may run on, at most 3.
WORKERS = max(0, min(3, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) - 1))

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="dmrpc-copy")
        return _pool


def _forget_pool() -> None:     # a forked child has the pool's object, not its threads
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def parts(nbytes: int) -> int:
    """How many parts a copy of ``nbytes`` bytes is cut into (1: one ``np.copyto``)."""
    return 1 if nbytes < PARALLEL_AT or not WORKERS else WORKERS + 1


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``np.copyto(dst, src)`` for arrays of one dtype and shape, large C-contiguous ones in :func:`parts`."""
    n = parts(src.nbytes)
    if n == 1 or not (dst.flags.c_contiguous and src.flags.c_contiguous) or dst.dtype != src.dtype \
            or dst.shape != src.shape:
        np.copyto(dst, src)
        return
    flat_dst, flat_src = dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8)
    cut = -(-flat_src.size // n) // 64 * 64 or flat_src.size      # whole cache lines a part
    pool = _workers()
    pending = [pool.submit(np.copyto, flat_dst[a:a + cut], flat_src[a:a + cut])
               for a in range(cut, flat_src.size, cut)]
    np.copyto(flat_dst[:cut], flat_src[:cut])
    for job in pending:
        job.result()


def copied(src: np.ndarray) -> np.ndarray:
    """A new C-contiguous array the caller owns, with ``src``'s dtype, shape and values."""
    out = np.empty(src.shape, src.dtype)
    copy_into(out, src)
    return out
