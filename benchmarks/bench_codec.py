"""Tensor codec: dmrpc_gym.protocol.tensors against dm_env_rpc.v1.tensor_utils, side by side.

    python benchmarks/bench_codec.py [--repeats N]

Every row times the same operation on both sides, in one run, interleaved
(official, ours, official, ours, ...), and keeps the best of the repeats:

    pack         value -> Tensor message
    unpack       Tensor message -> numpy array, as each side returns it
    wire pack    value -> serialized Tensor bytes
    wire unpack  serialized Tensor bytes -> a writable numpy array

``ratio`` is official / ours: above 1 ours is faster. Before timing, both
sides' results are checked to be equal (same bytes, same arrays).

For int8/uint8 payloads the official ``unpack`` returns a read-only view of
the payload's bytes (``np.frombuffer``), while ours returns a writable array
the caller owns, which costs one more copy; the official ``pack`` is a single
``tobytes()`` assignment. Both are already close to one memcpy, so no codec can
be 10x faster there; the ``wire`` rows compare the two with the same
guarantees (the official result is copied only when it is read-only).

Another script can reuse the table: ``from bench_codec import codec_table, format_table``.
"""
from __future__ import annotations

import argparse
import math
import platform
import sys
import timeit
from typing import Any, Callable

import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2 as official_pb
from dm_env_rpc.v1 import tensor_utils

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.wire import pb

#: The cases the project's issue asks for first; the 10x target applies to these.
TARGET_CASES = ("f32 1e5", "u8 84x84x3")


def cases() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "f32 1e5": rng.random(100_000, dtype=np.float32),
        "u8 84x84x3": rng.integers(0, 256, (84, 84, 3), dtype=np.uint8),
        "f64 1e4": rng.random(10_000),
        "i32 1e4": rng.integers(-2 ** 31, 2 ** 31, 10_000).astype(np.int32),
        "i32 1e4 0..999": rng.integers(0, 1000, 10_000).astype(np.int32),
        "scalar float": 1.5,
    }


def _writable(value: Any) -> np.ndarray:
    """The official result as a writable array: a copy only when it is read-only."""
    array = np.asarray(value)
    return array if array.flags.writeable else array.copy()


def operations(value: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """op -> (official, ours), each a no-argument call doing the whole operation."""
    official_tensor = tensor_utils.pack_tensor(value)
    our_tensor = tensors.pack(value)
    data = our_tensor.SerializeToString()
    return {
        "pack": (lambda: tensor_utils.pack_tensor(value), lambda: tensors.pack(value)),
        "unpack": (lambda: tensor_utils.unpack_tensor(official_tensor), lambda: tensors.unpack(our_tensor)),
        "wire pack": (lambda: tensor_utils.pack_tensor(value).SerializeToString(),
                      lambda: tensors.pack(value).SerializeToString()),
        "wire unpack": (lambda: _writable(tensor_utils.unpack_tensor(official_pb.Tensor.FromString(data))),
                        lambda: tensors.unpack(pb.Tensor.FromString(data))),
    }


def _check(op: str, theirs: Any, ours: Any) -> None:
    """Both sides must produce the same thing, or the timing means nothing."""
    if op in ("pack", "wire pack"):
        if op == "pack":
            theirs, ours = theirs.SerializeToString(), ours.SerializeToString()
        assert theirs == ours, f"{op}: the two sides packed different bytes"
    else:
        assert np.array_equal(np.asarray(theirs), ours) and np.asarray(theirs).shape == ours.shape, \
            f"{op}: the two sides unpacked different arrays"


def _note(case_value: Any, op: str) -> str:
    raw = isinstance(case_value, np.ndarray) and case_value.dtype in (np.uint8, np.int8)
    if raw and op == "unpack":
        return "official: read-only view, no copy; ours: writable, owned copy"
    if raw and op == "pack":
        return "official: one tobytes() assignment"
    if op == "wire unpack":
        return "both writable"
    return ""


def _per_call(fn: Callable[[], Any], number: int) -> float:
    """Seconds per call over ``number`` calls (timeit: the garbage collector is off)."""
    return timeit.Timer(fn).timeit(number) / number


def _calls_for(fn: Callable[[], Any], min_time: float) -> int:
    """How many calls make a timing sample of at least ``min_time`` seconds."""
    once = min(_per_call(fn, 1) for _ in range(3))
    return max(1, math.ceil(min_time / max(once, 1e-9)))


def codec_table(repeats: int = 7, min_time: float = 0.003) -> list[dict]:
    """One row per (case, op): ``case, op, official_us, ours_us, ratio, note``.

    Each timing sample runs enough calls to last ``min_time`` seconds; the two
    sides' samples alternate, and each side keeps its fastest of ``repeats``.
    """
    rows = []
    for case, value in cases().items():
        for op, (theirs, ours) in operations(value).items():
            _check(op, theirs(), ours())
            number = max(_calls_for(theirs, min_time), _calls_for(ours, min_time))
            best = [float("inf"), float("inf")]
            for _ in range(repeats):
                for side, fn in enumerate((theirs, ours)):
                    best[side] = min(best[side], _per_call(fn, number))
            rows.append({"case": case, "op": op, "official_us": best[0] * 1e6, "ours_us": best[1] * 1e6,
                         "ratio": best[0] / best[1], "note": _note(value, op)})
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table."""
    lines = [f"{'case':<16}{'op':<13}{'official us':>12}{'ours us':>11}{'ratio':>9}  note"]
    for r in rows:
        lines.append(f"{r['case']:<16}{r['op']:<13}{r['official_us']:>12.2f}{r['ours_us']:>11.2f}"
                     f"{r['ratio']:>8.1f}x  {r['note']}".rstrip())
    return "\n".join(lines)


def target_summary(rows: list[dict]) -> str:
    """Whether the 10x target (pack and unpack of the target cases) is met, row by row."""
    out = []
    for r in rows:
        if r["case"] in TARGET_CASES and r["op"] in ("pack", "unpack"):
            verdict = "met" if r["ratio"] >= 10 else "NOT met"
            out.append(f"10x target, {r['case']} {r['op']}: {r['ratio']:.1f}x, {verdict}")
    out.append("uint8: the official pack is one tobytes() assignment and its unpack a zero-copy,\n"
               "read-only np.frombuffer view, so ours (which must copy to return a writable,\n"
               "owned array) can only trim per-call overhead there; 10x is not physically\n"
               "possible. The 'wire' rows compare both sides paying the same copies.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    import google.protobuf
    from google.protobuf.internal import api_implementation
    print(f"python {platform.python_version()}, numpy {np.__version__}, protobuf {google.protobuf.__version__} "
          f"({api_implementation.Type()}), {platform.machine()}")
    rows = codec_table(repeats=args.repeats)
    print(format_table(rows))
    print()
    print(target_summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
