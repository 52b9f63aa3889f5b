"""The server's ping policy, as gRPC's own servers apply it (issue 30, item 1).

grpc-go, grpc-java and C-core clients send a PING as data arrives (their BDP
estimator sizes the flow-control window with it). gRPC's servers never count
these: sending HEADERS or DATA clears the strikes and the last PING's time. A
client that PINGs every 100 ms with no data still gets GOAWAY too_many_pings.
"""
from __future__ import annotations

import time

from raw_h2 import BDP_PING, BdpClient, RawClient, answers, data, joined, message, step_request

from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport.frames import ACK, ENHANCE_YOUR_CALM, GOAWAY, PING, U32, frame

STREAMS = [1 + 2 * k for k in range(8)]     # 8 concurrent streams on one connection
ROUNDS = 40                                 # steps on each
PAUSE = 1.5                                 # seconds of an idle pause half-way (no data, no PING)
LARGE = 4 << 20                             # float32s of the large observation: 16 MiB



def test_bdp_pings_on_8_streams_a_large_answer_and_an_idle_pause_are_never_strikes(slow_server):
    """The issue's grpc-go cases with the server's default policy: 8 concurrent streams stepping,
    an idle pause, a 16 MiB observation (its DATA frames go out as the window opens, each
    followed by a PING), and the streams ended one by one (trailers, each followed by a PING)."""
    raw = BdpClient(slow_server.address)
    try:
        for sid in STREAMS:
            joined(raw, sid)
        for step in range(ROUNDS):
            raw.send(b"".join(data(sid, step_request()) for sid in STREAMS))
            assert all(a.WhichOneof("payload") == "step" for a in answers(raw, STREAMS).values())
            if step == ROUNDS // 2:
                time.sleep(PAUSE)
        big = STREAMS[-1] + 2
        joined(raw, big, size=LARGE)
        raw.send(data(big, message(pb.EnvironmentRequest(step=pb.StepRequest(requested_observations=[1])))))
        assert len(answers(raw, [big])[big].step.observations[1].floats.array) == LARGE
        for sid in [*STREAMS, big]:
            raw.send(data(sid, b"", end=True))
            assert raw.trailers(sid)["grpc-status"] == "0"
        raw.send(frame(PING, 0, 0, BDP_PING))          # the connection is still served
        while raw.outstanding:
            assert raw.next_frame() is not None, raw.seen_goaway
        assert raw.seen_goaway is None and raw.pings > 2 * ROUNDS
    finally:
        raw.close()


def test_pings_every_100_ms_through_an_idle_pause_end_the_connection(slow_server):
    """An abusive client, PINGs and no data, still gets GOAWAY ENHANCE_YOUR_CALM too_many_pings,
    after the one PING its last answer allows and two strikes."""
    raw = RawClient(slow_server.address)
    try:
        joined(raw)
        goaway, sent = None, 0
        while goaway is None and sent < 30:
            time.sleep(0.1)
            raw.send(frame(PING, 0, 0, bytes(8)))
            sent += 1
            while (got := raw.next_frame()) is not None:     # its ACK, or the GOAWAY
                kind, flags, _, payload = got
                if kind == GOAWAY:
                    goaway = (U32.unpack_from(payload, 4)[0], payload[8:].decode())
                if kind == GOAWAY or (kind == PING and flags & ACK):
                    break
        assert goaway == (ENHANCE_YOUR_CALM, "too_many_pings") and sent == 4
    finally:
        raw.close()
