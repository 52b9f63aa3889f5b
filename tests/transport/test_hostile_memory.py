"""A few bytes from a peer buy a bounded amount of memory (issue 23, findings 1 and 2).

Each attack is measured as it is made: this process's resident memory (the
server runs in it) before and after, while an honest client steps beside it.
On the tree before these bounds, the same inputs cost a gigabyte or more.
"""
from __future__ import annotations

import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb
from dm_env_rpc.v1 import error as dm_error

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch
from hostile import BOUND, Honest, MB, measured, resident, stepped_beside
from official_servers import start_official_server
from raw_h2 import RawClient, data
from servers import OfficialClient


@pytest.fixture
def catch_server():
    with Server(Catch) as server:
        yield server


def test_declared_message_sizes_cost_only_the_bytes_that_arrive(catch_server):
    """24 streams each declare a 64 MiB message and send 1 KB of it (finding 1: +1.5 GB before)."""
    before = resident()
    raw = RawClient(catch_server.address)
    honest = Honest(catch_server.address)
    try:
        for k in range(24):
            sid = 1 + 2 * k
            raw.send(raw.request_headers(sid))
            raw.send(data(sid, b"\x00" + ((64 * MB) - 16).to_bytes(4, "big") + bytes(1000)))
        honest.start()
        honest.join(60)
        grown = resident() - before
    finally:
        raw.close()
    assert honest.error is None and honest.steps == 100
    measured("24 streams declaring 64 MiB messages (finding 1)", f"{grown / MB:+.0f} MB", honest)
    assert grown < BOUND, f"{grown / MB:+.0f} MB for 24 KB of declared-but-unsent messages"


def started(client: OfficialClient, kind: str) -> int:
    """Create and join a world and take its first step: the UID of its first ``kind`` spec
    (``"actions"`` or ``"observations"``)."""
    world = client.send(dpb.CreateWorldRequest()).world_name
    specs = client.send(dpb.JoinWorldRequest(world_name=world)).specs
    client.send(dpb.StepRequest())
    return next(iter(getattr(specs, kind)))


def test_one_element_actions_and_settings_cannot_broadcast_past_their_spec(catch_server):
    """A one-element tensor claiming a huge shape is refused before it is allocated (finding 2:
    a 19-byte Step +1 GB, a 59-byte CreateWorld +1.2 GB before)."""
    before = resident()
    with OfficialClient(catch_server.address) as client:
        uid = started(client, "actions")
        huge_action = dpb.Tensor(int8s=dpb.Tensor.Int8Array(array=b"\x00"), shape=[1 << 30])
        with pytest.raises(dm_error.DmEnvRpcError, match="broadcast"):
            client.send(dpb.StepRequest(actions={uid: huge_action}))
        huge_setting = dpb.Tensor(doubles=dpb.Tensor.DoubleArray(array=[1.0]), shape=[1 << 27])
        for request in (dpb.CreateWorldRequest(settings={"rows": huge_setting}),
                        dpb.ResetRequest(settings={"seed": huge_setting})):
            with pytest.raises(dm_error.DmEnvRpcError, match="broadcast"):
                client.send(request)
        honest = stepped_beside(catch_server.address)
    measured("a one-element Step, CreateWorld and Reset claiming 2**30 / 2**27 elements (finding 2)",
             f"{(resident() - before) / MB:+.0f} MB", honest)
    assert resident() - before < BOUND


def test_a_server_cannot_make_the_client_broadcast_an_observation_past_its_spec():
    """A 30-byte observation claiming 2**27 doubles (+1 GB before) is refused by name."""
    lie = dpb.Tensor(doubles=dpb.Tensor.DoubleArray(array=[1.0]), shape=[1 << 27])
    specs = {"paddle": dict(kind="action", dtype="int32", shape=[], min=-1, max=1),
             "signal": dict(dtype="float64", shape=[-1]), "pos": dict(dtype="float64", shape=[2])}
    for name in ("signal", "pos"):                       # no size in the spec; a size in the spec
        with start_official_server(specs, observation_fn=lambda n, spec, step, name=name:
                                   lie if n == name else np.zeros([max(d, 1) for d in spec.shape])) as server:
            before = resident()
            env = DmRpcEnv(server.address, seed_setting=None)
            try:
                with pytest.raises(ValueError, match=f"observation {name!r}.*broadcast"):
                    env.reset()
            finally:
                env.close()
            assert resident() - before < BOUND


def test_long_requested_observation_lists_are_not_kept(catch_server):
    """64 Steps each requesting one observation a million times (a 1 MB list, each a little longer)
    filled the plan cache with 64 tuples of a million entries (finding 10: +530 MB before)."""
    before = resident()
    with OfficialClient(catch_server.address) as client:
        uid = started(client, "observations")
        for k in range(64):
            answer = client.send(dpb.StepRequest(requested_observations=[uid] * ((1 << 20) + k)))
            assert list(answer.observations) == [uid]
        honest = stepped_beside(catch_server.address)
    measured("64 Steps each requesting one observation 2**20 times (finding 10)", f"{(resident() - before) / MB:+.0f} MB", honest)
    assert resident() - before < BOUND, f"{(resident() - before) / MB:+.0f} MB"
