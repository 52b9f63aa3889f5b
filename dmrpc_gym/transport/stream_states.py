"""A stream's state at either end of an HTTP/2 connection (RFC 9113 5.1), as two halves with a table each.

Each end keeps, for each stream, what the peer has sent (:class:`Inbound`) and what it has sent
itself (:class:`Outbound`): each half goes FRESH (no HEADERS yet) -> OPEN (HEADERS) -> DONE/ENDED
(END_STREAM or a reset), and may skip OPEN (a trailers-only answer). The transition tables are
written once, here, for both ends: the server's streams begin with the client's HEADERS
(inbound OPEN, outbound FRESH), the client's with its own (inbound FRESH, outbound OPEN).
:func:`rfc_state` names the pair as RFC 9113 does.

>>> rfc_state(Inbound.OPEN, Outbound.FRESH), rfc_state(Inbound.DONE, Outbound.OPEN)
('open', 'half-closed (remote)')
>>> Outbound.OPEN.to(Outbound.ENDED)
<Outbound.ENDED: 'ended'>
>>> Inbound.DONE.to(Inbound.OPEN)
Traceback (most recent call last):
...
dmrpc_gym.protocol.states.IllegalTransition: Inbound: no transition from DONE to OPEN (from DONE: none: it is final)
"""
from __future__ import annotations

from dmrpc_gym.protocol.states import State, transitions

__all__ = ["Inbound", "Outbound", "rfc_state"]


class Inbound(State):
    """The peer's half: nothing from it yet (FRESH), its HEADERS came (OPEN), its END_STREAM or a reset (DONE)."""

    FRESH = "fresh"
    OPEN = "open"
    DONE = "done"


class Outbound(State):
    """Our half: nothing sent yet (FRESH), our HEADERS out (OPEN), END_STREAM (trailers) or a reset out (ENDED)."""

    FRESH = "fresh"
    OPEN = "open"
    ENDED = "ended"


transitions(Inbound, {Inbound.FRESH: {Inbound.OPEN, Inbound.DONE}, Inbound.OPEN: {Inbound.DONE}, Inbound.DONE: set()})
transitions(Outbound, {Outbound.FRESH: {Outbound.OPEN, Outbound.ENDED}, Outbound.OPEN: {Outbound.ENDED},
                       Outbound.ENDED: set()})


def rfc_state(inbound: Inbound, outbound: Outbound) -> str:
    """RFC 9113's name (section 5.1) for a stream whose halves are ``inbound`` and ``outbound``."""
    if inbound is Inbound.FRESH and outbound is Outbound.FRESH:
        return "idle"
    if inbound is Inbound.DONE:
        return "closed" if outbound is Outbound.ENDED else "half-closed (remote)"
    return "half-closed (local)" if outbound is Outbound.ENDED else "open"
