"""A request whose answer is still to come, and what becomes of that answer (a small state machine).

A :class:`~dmrpc_gym.client.connection.Connection` answers requests in the order they were
written. Each written request is a :class:`Pending` in its queue until its answer is read: OWED while
a caller waits for it, DROPPED once its caller gave up (an interrupt, an error between writing and
reading), when the answer is read and dropped as it comes, never taken for a later request's.

>>> entry = Pending("step", 7)
>>> entry.answer
<Answer.OWED: 'owed'>
>>> entry.drop(); entry.answer
<Answer.DROPPED: 'dropped'>
"""
from __future__ import annotations

from dmrpc_gym.protocol.states import State, transitions

__all__ = ["Answer", "Pending"]


class Answer(State):
    """What becomes of a pending request's answer: taken by its caller (OWED) or read and dropped."""

    OWED = "owed"
    DROPPED = "dropped"


transitions(Answer, {Answer.OWED: {Answer.DROPPED}, Answer.DROPPED: set()})
_OWED = Answer.OWED                      # (every request's: a global, not an enum lookup)


class Pending:
    """A written request: the envelope field its answer must carry, its number, and its :class:`Answer`."""

    __slots__ = ("field", "number", "answer")

    def __init__(self, field: str, number: int):
        self.field, self.number, self.answer = field, number, _OWED

    def drop(self) -> None:
        """Its caller gave up: the answer is read and dropped when it comes."""
        self.answer = self.answer.to(Answer.DROPPED)

    def __repr__(self) -> str:
        return f"Pending({self.field!r}, {self.number}, {self.answer.name})"
