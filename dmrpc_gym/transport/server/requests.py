"""What the server takes in on a stream: requests queued from the DATA its state admitted, inflated as taken.

A mixin of :class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol`. Memory follows
what the application consumes, not what arrives: the receive windows are the state's
(:func:`~dmrpc_gym.transport.server.state.receive_window`), and bytes are given back
(WINDOW_UPDATE) only once the session has taken the requests they carried (:meth:`Requests._consumed`).
A stream holds at most :data:`_MAX_QUEUED` requests; a compressed request stays compressed until
the session takes it, and is then inflated a step at a time within the size limit, one message
larger than a step at a time per server (:func:`inflation_turn`).
"""
from __future__ import annotations

import asyncio
import weakref

from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.codes import GrpcStatus
from dmrpc_gym.transport.frames import END_STREAM, SERVER_MESSAGE_LIMIT, STREAM_CLOSED, StreamError
from dmrpc_gym.transport.server.stream import Inbound, Stream

__all__ = ["Requests", "inflation_turn"]

_MAX_QUEUED = 1024               # requests waiting on one stream; more is RESOURCE_EXHAUSTED


class Requests:
    """The receiving half of the server's HTTP/2 protocol.

    What it needs of its host: :class:`~dmrpc_gym.transport.server.contracts.RequestsHost`.
    """

    def _feed(self, stream: Stream, flags: int, payload) -> None:
        """``payload`` (a DATA frame's, or part of one: then ``flags`` has no END_STREAM) into the stream's
        messages; the requests it completes are answered (the state counted its bytes in ``stream.held``
        as it admitted them)."""
        inbox = stream.inbox
        before = len(inbox)
        try:
            stream.splitter.feed(payload, inbox)
            if len(inbox) > _MAX_QUEUED:
                raise StreamError(GrpcStatus.RESOURCE_EXHAUSTED,
                                  f"more than {_MAX_QUEUED} requests wait on this stream unanswered")
        except StreamError as err:       # too large, badly compressed, too many: this stream only
            self._refuse(stream, err, flags & END_STREAM)
            return
        if len(inbox) != before:
            self._run(stream)
        if flags & END_STREAM:
            self._client_done(stream)

    def _consumed(self, stream: Stream, n: int) -> None:
        """The session took ``n`` bytes of the stream's requests: the client may send as many more
        (the credit policy is the state's: :meth:`~dmrpc_gym.transport.server.state.ServerState.consume`)."""
        self.state.consume(stream, n)
        self._write_owed()

    def _write_owed(self) -> None:
        """Write what the connection's state owes the client (WINDOW_UPDATEs), if anything."""
        if self.state.outbox:
            self._write(self.state.data_to_send())

    def _client_done(self, stream: Stream) -> None:
        if stream.inbound is Inbound.DONE:       # trailers after END_STREAM (RFC 9113 5.1)
            self._reset(stream, STREAM_CLOSED)
            return
        stream.inbound = stream.inbound.to(Inbound.DONE)
        stream.inbox.append(None)
        self._run(stream)

    async def _inflate(self, stream: Stream, raw: bytes) -> bytes | bytearray:
        """A compressed request inflated step by step, letting the other streams run between steps.

        A message that inflates within one step (:data:`~dmrpc_gym.transport.compression.INFLATE_STEP`)
        is inflated at once; a larger one waits for the server's turn (:func:`inflation_turn`) and
        is inflated again from its start while it holds the turn, into one buffer: of the size a gzip
        message says it inflates to (within the size limit), filled in place, so that no growth copies
        it (a heap that has served for a while may not grow a large buffer where it lies); grown past
        that size if the message said less, cut to what came if it said more.
        """
        first = next(encodings.inflating(stream.encoding, raw, self._max_message, SERVER_MESSAGE_LIMIT), b"")
        if len(first) < encodings.INFLATE_STEP:
            return first
        del first                        # not held while waiting for the turn
        async with inflation_turn():
            out = bytearray(encodings.inflated_size(stream.encoding, raw, self._max_message))
            filled = 0
            for piece in encodings.inflating(stream.encoding, raw, self._max_message, SERVER_MESSAGE_LIMIT):
                if filled:
                    await asyncio.sleep(0)
                end = filled + len(piece)
                if end <= len(out):
                    memoryview(out)[filled:end] = piece    # (bytearray's slice assignment copies twice)
                else:
                    del out[filled:]
                    out += piece
                filled = end
            del out[filled:]
            return out


_TURNS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()


def inflation_turn() -> asyncio.Lock:
    """The lock a message larger than one inflation step holds while it inflates: one per event
    loop, so one per server (each serves on a loop of its own). The server's inflation budget is
    thus one largest message, however many compressed messages arrive at once; inflation runs on
    the loop's thread either way, so taking turns costs no throughput."""
    loop = asyncio.get_running_loop()
    turn = _TURNS.get(loop)
    if turn is None:
        turn = _TURNS[loop] = asyncio.Lock()
    return turn
