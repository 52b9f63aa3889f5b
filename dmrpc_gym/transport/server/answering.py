"""How a stream's requests are answered, and how its answering ends (a mixin of
:class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol`).

Each request is answered in order: with one message (dm_env_rpc's ``Process``: ``handle(raw)``
awaits it), or, for a method served with ``many=True``
(:class:`~dmrpc_gym.transport.server.methods.Method`), with every message its handler's
async iterator yields, sent as they come, for as long as it goes on (health's ``Watch`` streams
until the client cancels). Which of the two is chosen once, at the stream's HEADERS
(``Stream.many``); a message of ``Process`` pays one flag test for it.
"""
from __future__ import annotations

import asyncio
import logging

from dmrpc_gym.transport.codes import GrpcStatus
from dmrpc_gym.transport.frames import Deflated, StreamError
from dmrpc_gym.transport.server.stream import Inbound, Outbound, Stream

__all__ = ["Answering"]

log = logging.getLogger("dmrpc_gym.server")


class Answering:
    """A stream's requests answered in order (see the module doc), and the end of its answering.

    What it needs of its host: :class:`~dmrpc_gym.transport.server.contracts.AnsweringHost`.
    """

    async def _serve(self, stream: Stream) -> None:
        """Answer the waiting requests in order; trailers (OK) once the client is done writing and the
        last request's answers are over."""
        inbox, session, many, over = stream.inbox, stream.session, stream.many, True
        try:
            while inbox:
                raw = inbox.popleft()
                if raw is None:
                    self._trailers(stream, GrpcStatus.OK, "")
                    break
                self._consumed(stream, len(raw) + 5)
                if type(raw) is Deflated:
                    raw = await self._inflate(stream, raw)
                if many:
                    async for answer in session.handle(raw):
                        await self._send(stream, answer)
                else:                    # a steady answer, asked once (transport.server.steady), or handle's
                    answer = self._steady_answer(stream, raw)
                    await self._send(stream, answer if answer is not None else await session.handle(raw))
            else:
                over = False             # more requests may come
        except BaseException as exc:  # noqa: BLE001 - see _failed: a status for this stream, or re-raised
            self._failed(stream, exc)
        finally:
            self._served(stream, over)

    def _failed(self, stream: Stream, exc: BaseException) -> None:
        """A stream's answering stopped on ``exc``: cancelled (the stream or the connection
        ended: nothing to say), a :class:`StreamError` (its status ends the call: a request too
        large to inflate, or a handler's own status), or a failure (INTERNAL, logged); anything
        else (``KeyboardInterrupt``, ``SystemExit``) goes on up."""
        if isinstance(exc, asyncio.CancelledError):
            return
        if isinstance(exc, StreamError):
            self._refuse(stream, exc, stream.inbound is Inbound.DONE)
        elif isinstance(exc, Exception):   # end this stream with a status, keep the connection
            log.error("a stream failed", exc_info=exc)
            self._trailers(stream, GrpcStatus.INTERNAL, f"{type(exc).__name__}: {exc}")
        else:
            raise exc

    def _served(self, stream: Stream, over: bool) -> None:
        """A turn of answering is done: the stream is finished if it is ``over`` or ended meanwhile."""
        stream.busy, stream.task = False, None
        if over or stream.outbound is Outbound.ENDED or self._closed:
            self._finish(stream)
