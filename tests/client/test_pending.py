"""The client's pending answers (client/pending.py) and their use by a real connection."""
from __future__ import annotations

import pytest
import servers

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.pending import Answer, Pending
from dmrpc_gym.protocol.states import IllegalTransition
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.worlds.catch import Catch


def test_an_answer_once_dropped_is_never_owed_again():
    entry = Pending("step", 3)
    entry.drop()
    with pytest.raises(IllegalTransition, match="Answer: no transition from DROPPED to OWED"):
        entry.answer.to(Answer.OWED)
    with pytest.raises(IllegalTransition, match="from DROPPED to DROPPED"):
        entry.drop()


def test_a_dropped_answer_is_read_and_never_taken_for_a_later_one():
    with servers.start(Catch) as server, Connection(server.address) as conn:
        world = conn.send(pb.CreateWorldRequest()).world_name
        conn.submit(pb.JoinWorldRequest(world_name=world))
        conn._pending[-1].drop()                       # as an interrupted caller leaves it
        assert [p.answer for p in conn._pending] == [Answer.DROPPED]
        reset = conn.send(pb.ResetRequest())            # its answer, not the join's
        assert reset.HasField("specs") and not conn._pending
