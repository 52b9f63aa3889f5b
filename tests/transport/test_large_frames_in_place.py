"""A large request's DATA frames read straight into its message on the server (issue 40 item 2):
however the bytes are cut into reads (a frame header split in two, a frame's payload in pieces of
any size, a small stream's request between two large frames), the request arrives bit for bit."""
from __future__ import annotations

import hashlib
import random

import gymnasium as gym
import numpy as np
import pytest

import servers
from raw_h2 import RawClient, answers, data, first_answer, joined, message
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.wire import pb

SIZE = 3 << 20


class Digest(gym.Env):
    """A world whose observation is the SHA-256 of its action (``act`` uint8s)."""

    metadata = {"render_modes": []}

    def __init__(self, act: int = 1):
        self.action_space = gym.spaces.Box(0, 255, (int(act),), np.uint8)
        self.observation_space = gym.spaces.Box(0, 255, (32,), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(32, np.uint8), {}

    def step(self, action):
        digest = np.frombuffer(hashlib.sha256(np.ascontiguousarray(action).tobytes()).digest(), np.uint8)
        return digest, 0.0, False, False, {}


def in_frames(sid: int, body: bytes, sizes: list[int]) -> bytes:
    """``body`` in DATA frames of the given ``sizes`` (cycled), the last one whatever is left."""
    out, at, k = [], 0, 0
    while at < len(body):
        n = sizes[k % len(sizes)]
        out.append(data(sid, body[at:at + n]))
        at, k = at + n, k + 1
    return b"".join(out)


def observed(answer: pb.EnvironmentResponse) -> bytes:
    assert answer.WhichOneof("payload") == "step", answer
    (tensor,) = answer.step.observations.values()
    return bytes(tensors.unpack(tensor).astype(np.uint8))


@pytest.mark.parametrize("cuts", ["whole", "odd pieces", "headers split", "tiny then large"])
def test_a_large_action_cut_into_reads_anyhow_arrives_bit_for_bit(cuts):
    rng = random.Random(cuts)
    action = np.frombuffer(rng.randbytes(SIZE), np.uint8)
    with servers.start(Digest, workers=0) as server:
        raw = RawClient(server.address, timeout=60)
        try:
            joined(raw, 1, act=SIZE)
            joined(raw, 3, act=1)                      # a second stream, whose small steps come between
            for sid in (1, 3):
                raw.send(data(sid, message(pb.EnvironmentRequest(step=pb.StepRequest()))))
                first_answer(raw, sid)                  # the sequence's first step
            body = message(pb.EnvironmentRequest(step=pb.StepRequest(actions={1: tensors.pack(action)}, requested_observations=[1])))
            # frames of odd sizes at or above the in-place size (65536), and a small one among them
            frames = in_frames(1, body, [300_001, 65_536, 1_000, 1 << 20, 70_003])
            small = data(3, message(pb.EnvironmentRequest(step=pb.StepRequest(
                actions={1: tensors.pack(np.array([7], np.uint8))}, requested_observations=[1]))))
            pieces, at = [], 0
            while at < len(frames):
                if cuts == "whole":
                    n = len(frames)
                elif cuts == "odd pieces":
                    n = rng.randrange(1, 200_000)
                elif cuts == "headers split":        # every cut falls inside the next frame's header
                    n = 300_001 + 9 + rng.randrange(1, 9) if at == 0 else rng.randrange(60_000, 400_000)
                else:
                    n = rng.choice([1, 9, 13, 65_545, 1 << 20])
                pieces.append(frames[at:at + n])
                at += n
            for piece in pieces:
                raw.send(piece)
            answer = first_answer(raw, 1)
            raw.send(small)
            assert observed(first_answer(raw, 3)) == hashlib.sha256(bytes([7])).digest()
        finally:
            raw.close()
    assert observed(answer) == hashlib.sha256(action.tobytes()).digest()


def test_small_requests_between_large_frames_of_another_stream():
    """A large message in frames with another stream's whole requests between them (HTTP/2 lets
    frames of streams interleave): both streams' requests arrive bit for bit."""
    rng = random.Random(1)
    action = np.frombuffer(rng.randbytes(SIZE), np.uint8)
    with servers.start(Digest, workers=0) as server:
        raw = RawClient(server.address, timeout=60)
        try:
            joined(raw, 1, act=SIZE)
            joined(raw, 3, act=1)
            for sid in (1, 3):
                raw.send(data(sid, message(pb.EnvironmentRequest(step=pb.StepRequest()))))
                first_answer(raw, sid)
            body = message(pb.EnvironmentRequest(step=pb.StepRequest(actions={1: tensors.pack(action)}, requested_observations=[1])))
            chunk = 500_001
            starts = range(0, len(body), chunk)
            for k, at in enumerate(starts):
                frame = data(1, body[at:at + chunk])
                small = data(3, message(pb.EnvironmentRequest(step=pb.StepRequest(
                    actions={1: tensors.pack(np.array([k], np.uint8))}, requested_observations=[1]))))
                raw.send(frame[:20_000])              # the large frame begun...
                raw.send(frame[20_000:] + small)      # ...its rest and another stream's request in one write
                got = answers(raw, [1, 3] if k == len(starts) - 1 else [3])
                assert observed(got[3]) == hashlib.sha256(bytes([k])).digest()
            assert observed(got[1]) == hashlib.sha256(action.tobytes()).digest()
        finally:
            raw.close()
