"""Fuzzed sequences of an honest client's frames (issue 30, item 6): never refused.

The frame fuzz (``test_fuzz.py``) checks that broken input is refused without harm;
this checks the other side: well-formed traffic, interleaved as real gRPC clients
interleave it, is always served. Each example is one connection of a client that
behaves like grpc-go's (a BDP PING after the DATA and HEADERS it receives, WINDOW_UPDATEs
for every DATA frame) and, in an order hypothesis picks, steps one stream or all at
once, opens and ends streams, sends extra WINDOW_UPDATEs, changes its SETTINGS within
RFC 9113's bounds, and pauses. The server must answer every request, end every stream
with status 0, and never send GOAWAY or RST_STREAM. Derandomized, as the frame fuzz.
"""
from __future__ import annotations

import struct
import time

import pytest
import servers
from hypothesis import given
from hypothesis import strategies as st
from fuzzing import fuzz_settings
from raw_h2 import BdpClient, answers, data, joined, step_request

from dmrpc_gym.transport.frames import (ACK, MIN_FRAME, PING, RST_STREAM, SETTING_FRAME, SETTING_HEADER_LIST,
                                        SETTING_HEADER_TABLE, SETTING_PUSH, SETTING_WINDOW, SETTINGS, U32,
                                        WINDOW_UPDATE, frame)
from dmrpc_gym.worlds.catch import Catch

SLOTS = 3                                      # streams an example may hold open at once
_TABLE = 4096                                  # HPACK's default dynamic table size

#: One SETTINGS pair within what RFC 9113 allows, and a client needs to keep its answers coming.
_SETTING = st.one_of(
    st.tuples(st.just(SETTING_WINDOW), st.integers(1 << 10, 1 << 24)),
    st.tuples(st.just(SETTING_FRAME), st.integers(MIN_FRAME, 1 << 20)),
    st.tuples(st.just(SETTING_HEADER_TABLE), st.integers(0, _TABLE)),
    st.tuples(st.just(SETTING_PUSH), st.just(0)),
    st.tuples(st.just(SETTING_HEADER_LIST), st.integers(1 << 10, 1 << 20)))
_ACTION = st.one_of(
    st.tuples(st.just("step"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("step all")),
    st.tuples(st.just("end"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("window"), st.integers(-1, SLOTS - 1), st.integers(1, 1 << 20)),   # -1: the connection
    st.tuples(st.just("settings"), st.lists(_SETTING, min_size=0, max_size=3)),
    st.tuples(st.just("pause"), st.sampled_from([0.0, 0.05, 0.15])))


class Recording(BdpClient):
    """A :class:`BdpClient` that notes every RST_STREAM the server sends."""

    def __init__(self, address: str):
        super().__init__(address)
        self.resets: list[int] = []

    def next_frame(self):
        got = super().next_frame()
        if got is not None and got[0] == RST_STREAM:
            self.resets.append(got[2])
        return got


class Slots:
    """The client's streams: slot -> open stream id; a stepped slot with none opens one (a world of its own)."""

    def __init__(self, raw: Recording):
        self.raw, self.open, self.next_sid = raw, {}, 1

    def sid(self, slot: int) -> int:
        if slot not in self.open:
            self.open[slot], self.next_sid = self.next_sid, self.next_sid + 2
            joined(self.raw, self.open[slot])
        return self.open[slot]

    def step(self, slots: list[int]) -> None:
        sids = [self.sid(slot) for slot in slots]
        self.raw.send(b"".join(data(sid, step_request()) for sid in sids))
        assert all(a.WhichOneof("payload") == "step" for a in answers(self.raw, sids).values())

    def end(self, slot: int) -> None:
        sid = self.open.pop(slot, None)
        if sid is not None:
            self.raw.send(data(sid, b"", end=True))
            assert self.raw.trailers(sid)["grpc-status"] == "0"


def play(raw: Recording, actions: list[tuple]) -> None:
    """Send ``actions`` as an honest client would, then end every stream and see the connection still served."""
    slots = Slots(raw)
    for action in actions:
        kind = action[0]
        if kind == "step":
            slots.step([action[1]])
        elif kind == "step all":
            slots.step(list(range(SLOTS)))
        elif kind == "end":
            slots.end(action[1])
        elif kind == "window":
            target = 0 if action[1] < 0 else slots.open.get(action[1], 0)
            raw.send(frame(WINDOW_UPDATE, 0, target, U32.pack(action[2])))
        elif kind == "settings":
            raw.send(frame(SETTINGS, 0, 0, b"".join(struct.pack(">HL", k, v) for k, v in action[1])))
        else:
            time.sleep(action[1])
    for slot in list(slots.open):
        slots.end(slot)
    raw.send(frame(PING, 0, 0, b"the end."))
    while (got := raw.next_frame()) is not None and not (got[0] == PING and got[1] & ACK and got[3] == b"the end."):
        pass
    assert got is not None, f"the connection ended (GOAWAY: {raw.seen_goaway})"


@pytest.fixture(scope="module")
def catch():
    with servers.start(Catch) as server:
        yield server


def test_an_honest_clients_frames_are_never_refused(catch):
    ran: list[int] = []

    @fuzz_settings(40)
    @given(st.lists(_ACTION, min_size=1, max_size=12))
    def check(actions: list[tuple]) -> None:
        ran.append(len(actions))
        raw = Recording(catch.address)
        try:
            play(raw, actions)
            assert raw.seen_goaway is None and not raw.resets, (raw.seen_goaway, raw.resets)
        finally:
            raw.close()

    check()
    print(f"{len(ran)} connections, {sum(ran)} actions")
