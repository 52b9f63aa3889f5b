"""A vector step's steady path: the sub-envs' requests in one ``send`` per HTTP/2 connection, their answers
taken by one read loop and read at their offsets.

The sub-envs of a vector env on one server share one HTTP/2 connection, a stream each
(:mod:`~dmrpc_gym.transport.client.pool`). Once a sub-env's :class:`~dmrpc_gym.client.steady_step.SteadyStep`
has learned the layout of its answers, its request is a memoized DATA frame and its answer is checked in
place. A vector step of such sub-envs is then, per connection, one
:meth:`~dmrpc_gym.transport.client.steady.SteadyTrips.send_frames` (every frame in one ``send``) and one
:meth:`~dmrpc_gym.transport.client.steady.SteadyTrips.take_answers` (as many ``recv`` as the answers take to
come, each checked against its sub-env's layouts), instead of a general write and read per sub-env, each a
walk through the frame loop, the message splitter and the envelope.

What it takes (the rest goes the general way, which stays the reference, with nothing lost):

- a sub-env whose steady step has a layout and whose connection owes no answer (``Connection.steady_idle``),
  stepping with an action whose request the steady step
  frames (memoized for integer actions), or starting its next sequence with no ResetRequest (the step with no
  actions: ``None``); a sub-env that is none of these sends its request the general way;
- a connection whose requests the transport sends at once (``send_frames`` says: else they go the general way);
- answers that come as the transport expects them (one DATA frame each, with one of the learned layouts:
  running, or an episode's end); the first that does not, and every one after it, is read the general way.

The step's result is the steady step's own (:meth:`~dmrpc_gym.client.steady_step.SteadyStep.taken`), as a
single env's steady step makes it.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from dmrpc_gym.transport import NOT_SENT, TAKEN

__all__ = ["SteadyBatch"]


class SteadyBatch:
    """The steady path of a vector step over ``agents`` (one :class:`~dmrpc_gym.client.agent.RemoteAgent` per
    sub-env): :meth:`frame` each sub-env's request, :meth:`send` them, :meth:`take` the answers, :meth:`answer`
    each sub-env's.

    >>> import numpy as np
    >>> from dmrpc_gym.client.env import DmRpcEnv
    >>> from dmrpc_gym.transport import SharedConnections
    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> address, shared = embedded_server("catch").address, SharedConnections()
    >>> envs = [DmRpcEnv(address, connections=shared) for _ in range(2)]
    >>> batch = SteadyBatch([env.agent for env in envs])
    >>> for env in envs:
    ...     _ = env.reset(seed=0); _ = env.step(np.int8(0)); _ = env.step(np.int8(0))   # layouts learned
    >>> sent = batch.send({i: batch.frame(i, np.int8(1)) for i in range(2)}, {})
    >>> batch.take(sent) == len(sent), sorted(batch.taken) == sent   # (none sent in a Jupyter kernel: all general)
    (True, True)
    >>> [batch.answer(i)[0].shape for i in sent] == [(10, 10)] * len(sent)
    True
    >>> for env in envs: env.close()
    """

    def __init__(self, agents: Sequence[Any]):
        self.agents = agents
        #: The sub-envs whose answers :meth:`take` took and :meth:`answer` has not read yet.
        self.taken: set[int] = set()
        #: Per connection, the sub-envs whose requests :meth:`send` sent and whose answers are not taken yet.
        self.flying: list[tuple[Any, list[int]]] = []

    def frame(self, i: int, action: Any) -> tuple[bytes, int] | None:
        """Sub-env ``i``'s request for ``action`` (None: the step that starts its next sequence) as its steady
        step frames it, where it can go this way; else None. A bad action raises as the general path's would."""
        agent = self.agents[i]
        steady = agent.steady
        if steady is None or steady.layout is None or not agent.connection.steady_idle:
            return None
        kind = type(action)
        framed = steady.frames.get((kind, action)) if kind in steady.memo_types else None
        return steady.frame(action) if framed is None else framed

    def send(self, framed: Mapping[int, tuple[bytes, int]], failures: dict[int, BaseException]) -> list[int]:
        """Send the ``framed`` requests (sub-env -> :meth:`frame`'s), one ``send`` per connection: the sub-envs
        sent (their answers owed); those of a connection that sent nothing go the general way, those of one
        whose send failed go to ``failures`` (the ``ConnectionError`` each sub-env's connection gives)."""
        groups: dict[Any, list[int]] = {}
        agents = self.agents
        for i in framed:
            groups.setdefault(agents[i].steady.link.connection, []).append(i)
        sent = []
        for connection, members in groups.items():
            links = [agents[i].steady.link for i in members]
            try:
                if connection.send_frames(links, [framed[i] for i in members]) is NOT_SENT:
                    continue
            except OSError as err:
                for i in members:
                    failures[i] = agents[i].connection.send_failed(err)
                continue
            for i in members:
                agents[i].connection.owe_step()
            self.flying.append((connection, members))
            sent += members
        return sent

    def take(self, indices: Any) -> int:
        """Read the answers of every connection that has a sub-env of ``indices`` in flight this way (all its
        sub-envs' answers: :attr:`taken` says which were taken); how many were."""
        agents, count, flying = self.agents, 0, []
        for connection, members in self.flying:
            if not any(i in indices for i in members):
                flying.append((connection, members))
                continue
            steadies = [agents[i].steady for i in members]
            count += connection.take_answers([steady.link for steady in steadies],
                                             [steady.layouts for steady in steadies],
                                             agents[members[0]].connection.timeout)
            for i, steady in zip(members, steadies):
                if steady.link.phase == TAKEN:
                    self.taken.add(i)
        self.flying = flying
        return count

    def answer(self, i: int) -> tuple:
        """Sub-env ``i``'s step, from the answer :meth:`take` took: ``(obs, reward, terminated, truncated, info)``."""
        self.taken.discard(i)
        agent = self.agents[i]
        steady = agent.steady
        return steady.taken(agent.connection.steady_answer(steady.link), steady.link.matched)

    def forget(self) -> None:
        """Nothing in flight this way any more (the answers owed are read the general way: taken ones lie on
        their streams, where the general read finds them)."""
        self.taken.clear()
        self.flying = []
