"""The deadlines of a server connection, kept by the event loop: a timer that runs only while one applies.

What the deadlines are (no preface within ``handshake_timeout``, a frame or header block
unfinished past ``frame_timeout``, no open stream for ``idle_timeout``) is the connection's state's
to say (:meth:`~dmrpc_gym.transport.server.state.ServerState.overdue`, given the time); this
mixin of :class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol` asks it on a timer, and ends
the connection when it answers.
"""
from __future__ import annotations

import asyncio
import logging

from dmrpc_gym.transport.frames import NO_ERROR, PROTOCOL_ERROR

__all__ = ["Watching"]

log = logging.getLogger("dmrpc_gym.server")


class Watching:
    """The connection's deadlines (a mixin of :class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol`):
    a timer that runs only while a deadline applies, asking the state each tick whether one has passed.

    What it needs of its host: :class:`~dmrpc_gym.transport.server.contracts.WatchingHost`.
    """

    def _watch(self) -> None:
        """A deadline may apply from now (a frame begun, the last stream gone): tick until none does.

        No timer runs while none can: a connection whose streams are open and whose frames
        are whole costs the event loop nothing (a timer always armed cost large transfers ~5 %)."""
        if self._tick is None and not self._closed:
            self._tick = asyncio.get_running_loop().call_later(self.state.tick, self._on_tick)

    def _on_tick(self) -> None:
        """Every ``ServerState.tick`` seconds while a deadline applies: end the connection should it
        stall or idle past its limits."""
        self._tick = None
        if self._closed or self._transport is None:
            return
        loop, state = asyncio.get_running_loop(), self.state
        why = state.overdue(loop.time())
        unfinished = state.unfinished()
        if why is None:
            if not state.started or unfinished is not None or not state.streams:
                self._tick = loop.call_later(state.tick, self._on_tick)
            return
        log.info("closing an HTTP/2 connection: %s", why)
        if not state.started:
            self._closed = True
            self._transport.close()
        else:
            self.abort(NO_ERROR if unfinished is None else PROTOCOL_ERROR, why)
