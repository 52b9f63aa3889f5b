"""Named states with a written transition rule, for the package's small state machines.

A state machine here is an :class:`enum.Enum` deriving :class:`State`, whose transition table is
given once by :func:`transitions`. ``state.to(new)`` returns ``new`` where the table allows it and
raises :class:`IllegalTransition`, naming both states, where it does not: a bug shows at the
transition that makes it, not later as an odd combination of flags. The server's streams, its
gym agents' sequences and the client's pending answers are such machines.

>>> class Door(State):
...     SHUT = "shut"
...     OPEN = "open"
...     LOCKED = "locked"
>>> transitions(Door, {Door.SHUT: {Door.OPEN, Door.LOCKED}, Door.OPEN: {Door.SHUT}, Door.LOCKED: {Door.SHUT}})
>>> Door.SHUT.to(Door.LOCKED)
<Door.LOCKED: 'locked'>
>>> Door.LOCKED.to(Door.OPEN)
Traceback (most recent call last):
...
dmrpc_gym.protocol.states.IllegalTransition: Door: no transition from LOCKED to OPEN (from LOCKED: SHUT)
"""
from __future__ import annotations

import enum
from typing import Mapping, TypeVar

__all__ = ["State", "IllegalTransition", "transitions"]

S = TypeVar("S", bound="State")


class IllegalTransition(RuntimeError):
    """A state machine was asked for a transition its table does not have (a bug, never the peer's doing)."""


class State(enum.Enum):
    """The base of an enum of states; its transition table is set by :func:`transitions`."""

    #: A state is itself alone (equal by identity): hashed by identity, in C, where ``Enum`` hashes its name in
    #: Python (a call for each look-up of a state in a transition table, a dict or a set).
    __hash__ = object.__hash__

    def to(self: S, new: S) -> S:
        """``new``, where the table allows the move from this state; else :class:`IllegalTransition`."""
        allowed = type(self)._moves_[self]
        if new in allowed:
            return new
        names = ", ".join(sorted(s.name for s in allowed)) or "none: it is final"
        raise IllegalTransition(f"{type(self).__name__}: no transition from {self.name} to {new.name} "
                                f"(from {self.name}: {names})")


def transitions(machine: type[S], table: Mapping[S, set[S]]) -> None:
    """Give ``machine`` its transition table: each state -> the states it may move to.

    Every state must appear (a final state with an empty set), so that no state is left
    without a written rule."""
    missing = [s.name for s in machine if s not in table]
    if missing:
        raise ValueError(f"{machine.__name__}'s transition table lacks {', '.join(missing)}")
    machine._moves_ = {state: frozenset(table[state]) for state in machine}
