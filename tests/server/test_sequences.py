"""A gym agent's sequence states (server/worlds/gym_world.py :class:`Sequence`): the table, and the
interruption a peer sees when another connection resets the world."""
from __future__ import annotations

import pytest
import servers

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.states import IllegalTransition
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server.worlds.gym_world import Sequence
from dmrpc_gym.worlds.catch import Catch


@pytest.mark.parametrize("start, end", [(Sequence.RUNNING, Sequence.STARTING), (Sequence.STALE, Sequence.RUNNING),
                                        (Sequence.INTERRUPTED, Sequence.RUNNING), (Sequence.IDLE, Sequence.RUNNING)])
def test_moves_outside_the_table_raise_naming_both_states(start, end):
    with pytest.raises(IllegalTransition, match=f"from {start.name} to {end.name}"):
        start.to(end)


def test_a_world_reset_by_another_connection_interrupts_then_starts_anew():
    with servers.start(Catch) as server, Connection(server.address) as a, Connection(server.address) as b:
        world = a.send(pb.CreateWorldRequest()).world_name
        a.send(pb.JoinWorldRequest(world_name=world))
        b.send(pb.JoinWorldRequest(world_name=world))
        states = [a.send(pb.StepRequest()).state, a.send(pb.StepRequest(actions={})).state]
        b.send(pb.ResetWorldRequest(world_name=world))
        states += [a.send(pb.StepRequest()).state, a.send(pb.StepRequest()).state]
        assert [pb.EnvironmentStateType.Name(s) for s in states] == ["RUNNING", "RUNNING", "INTERRUPTED", "RUNNING"]
