"""``dmrpc-gym serve --keepalive-min-time SECONDS --max-ping-strikes N`` (issue 42 item 9): the server's
ping policy (:class:`~dmrpc_gym.transport.limits.ConnectionLimits`) set from the command line, seen
from a raw HTTP/2 client over real loopback that PINGs at a given rate on an open stream."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from processes import ROOT, ServedProcess
from raw_h2 import RawClient, joined

from dmrpc_gym.transport.frames import ACK, ENHANCE_YOUR_CALM, GOAWAY, PING, U32, frame


def pings(address: str, every: float, count: int) -> tuple[int, tuple[int, str] | None]:
    """PING every ``every`` seconds on a joined stream (no data between), up to ``count`` PINGs:
    ``(PINGs acknowledged, (GOAWAY code, debug data) or None)``."""
    raw = RawClient(address)
    try:
        joined(raw)
        acked, goaway = 0, None
        for sent in range(count):
            if sent:
                time.sleep(every)
            raw.send(frame(PING, 0, 0, sent.to_bytes(8, "big")))
            while (got := raw.next_frame()) is not None:
                kind, flags, _, payload = got
                if kind == GOAWAY:
                    return acked, (U32.unpack_from(payload, 4)[0], payload[8:].decode())
                if kind == PING and flags & ACK:
                    acked += 1
                    break
        return acked, goaway
    finally:
        raw.close()


@pytest.fixture
def serve():
    started: list[ServedProcess] = []

    def start(*args: str) -> ServedProcess:
        started.append(ServedProcess(0, args=args))
        return started[-1]
    yield start
    for served in started:
        served.close()


def test_a_permitted_keepalive_is_never_refused_and_a_faster_one_is(serve):
    """With ``--keepalive-min-time 0.2``, PINGs 0.3 s apart all pass; PINGs 0.05 s apart are strikes:
    the first PING and ``--max-ping-strikes`` strikes pass, the next ends the connection."""
    served = serve("--keepalive-min-time", "0.2", "--max-ping-strikes", "3")
    assert pings(served.address, every=0.3, count=8) == (8, None)
    assert pings(served.address, every=0.05, count=20) == (4, (ENHANCE_YOUR_CALM, "too_many_pings"))


def test_the_default_policy_is_grpcs_5_minutes_and_2_strikes(serve):
    """Without the options, PINGs 0.3 s apart are strikes: the first and two more pass."""
    served = serve()
    assert pings(served.address, every=0.3, count=8) == (3, (ENHANCE_YOUR_CALM, "too_many_pings"))


@pytest.mark.parametrize("flag, value", [("--keepalive-min-time", "0"), ("--max-ping-strikes", "-1")])
def test_a_bad_value_is_named_by_its_flag(flag: str, value: str):
    done = subprocess.run([sys.executable, "-m", "dmrpc_gym", "serve", "catch", "--port", "0", flag, value],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and f"{flag} {value}: expected a number above 0" in done.stderr, done.stderr
