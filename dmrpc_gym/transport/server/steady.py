"""The server's steady-state requests: whole small requests at the start of a read, answered at once.

The steady path of :class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol` (a mixin; its
``data_received`` while the path is on): when what one read brought begins with whole DATA frames,
each holding one whole gRPC message on an open, idle stream whose handler has a synchronous answer for
it (a ``steady(message, room)`` that returns the answer's bytes, or None to decline before doing
anything), :meth:`Steady._steady_received` answers them in the same turn, a frame each, skipping the
frame loop, the splitter, the inbox, the answering coroutine and the general send; the general path
(``_frames_received``) reads whatever follows the first frame it cannot take. The requests of a vector
env's sub-envs on one connection come so, several in one read: their answers are gathered into one
write, as the general path gathers them.

It skips parsing and coroutines, never the bookkeeping: the frame header is read by
:func:`~dmrpc_gym.transport.frames.read_head` and the gRPC prefix by
:func:`~dmrpc_gym.transport.frames.read_prefix`, as the general path reads them (what they say of a
request's first 14 bytes is remembered: the requests of a stream repeat them), and a message past the
stream's size limit is left to the general path, whose ``read_prefix`` refuses it; the receive windows and
the credit move by one call into the connection's state
(:class:`~dmrpc_gym.transport.server.state.ServerState`), ``received`` (admitted and consumed at once,
the WINDOW_UPDATEs owed returned), and the send windows by one, ``take`` (which also tells the PING
policing that DATA went out): the state the general path feeds, whose frame counter the steady path
moves as the general path does. What it requires of the state and the protocol is written down in
:class:`~dmrpc_gym.transport.server.contracts.SteadyHost`.

What it assumes (anything else is left to the general path, untouched):

- the state holds nothing begun (no frame buffered or read in place, no header block open), the preface
  read, and the connection is not lingering;
- each frame is a whole DATA frame (no flags: not padded, not END_STREAM) within both receive windows, on a
  stream whose client may still send (``Inbound.OPEN``) and to which response headers went
  (``Outbound.OPEN``), of a method answering one message a request, not answering now, with nothing
  queued, no message part way through its splitter, and no compression either way;
- the message is uncompressed and within the stream's message limit;
- the transport is writable. An answer that fits one frame, the send windows and a write chunk is
  written at once; a larger one (an unusual step: a large ``info``) goes out as the general path sends,
  awaiting the windows, with the stream busy meanwhile (requests that come then wait their turn).

The env call an answer makes runs inline, as the general path runs a short step (see
:mod:`dmrpc_gym.server.running.workers`); a handler declines where the general path would hand it to a thread.
``DMRPC_STEADY_STEP=0`` turns the path off (read per connection).
"""
from __future__ import annotations

from time import perf_counter

from dmrpc_gym.protocol.protowire import remember
from dmrpc_gym.transport.frames import DATA, GATHER_SECONDS, IN_PLACE, MAX_WINDOW, WRITE_CHUNK, ProtocolError, \
    grpc_frame, read_head, read_prefix
from dmrpc_gym.transport.server import eager
from dmrpc_gym.transport.server.stream import Inbound, Outbound, Stream

_OPEN, _REPLIED = Inbound.OPEN, Outbound.OPEN
_HEADS: dict[tuple[int, int], bytes] = {}     # (stream id, DATA payload size) -> the 14 bytes before a message
#: The 14 bytes before a request -> ``(DATA payload size, stream id)``, where they begin a DATA frame without
#: flags whose payload is one uncompressed message (what read_head and read_prefix said of them).
_REQUESTS: dict[bytes, tuple[int, int]] = {}
_KEPT = 4096            # entries of each memo (emptied whole when full: protowire.remember)
_NO_LIMIT = 1 << 32     # (a memo's prefix is read without a limit: the stream's is held to at each request)
#: The room an answer may take: one write chunk less its gRPC prefix (an answer past the windows waits).
_ROOM = WRITE_CHUNK - 5

__all__ = ["Steady"]


class Steady:
    """The steady path of the server's protocol (a mixin; see the module's docstring).

    What it needs of its host: :class:`~dmrpc_gym.transport.server.contracts.SteadyHost`.
    """

    def _steady_received(self, data: bytes) -> None:
        """``data_received`` on the steady path: the whole steady requests that begin ``data`` are
        answered here, the rest goes to the general path."""
        state = self.state
        if (state.buf or state.part is not None or self._lingering or not state.started
                or state.headers_in.data is not None):
            return self._frames_received(data)
        streams = state.streams
        n, at, held = len(data), 0, False
        while n - at >= 14:
            try:
                length, sid = _REQUESTS[data[at:at + 14]]
            except KeyError:
                length, kind, flags, sid = read_head(data, at)
                flag, size = read_prefix(data, at + 9, _NO_LIMIT, "")
                if kind != DATA or flags or flag or size != length - 5:
                    break
                remember(_REQUESTS, data[at:at + 14], (length, sid), _KEPT)
            end = at + 9 + length
            if end > n:
                break
            try:
                stream = streams[sid]
            except KeyError:
                break
            splitter = stream.splitter
            if (length - 5 > splitter.limit         # (the general path refuses it: read_prefix)
                    or stream.busy or stream.inbox or stream.inbound is not _OPEN
                    or stream.outbound is not _REPLIED or stream.many or stream.compress is not None
                    or splitter.buffered or splitter.large is not None or not self._writable):
                break
            host = stream.steady_host       # (a handler without a steady answer: the general path only)
            if host is None or host.steady is None:
                break
            try:
                owed = state.received(stream, length)   # admitted and consumed (stream.held: up and down)
            except ProtocolError:
                break                   # past a receive window: the general path ends the connection
            if end < n and not held:        # several requests in one read: their answers go out together,
                self._hold()                # as the general path gathers them
                held = True
            answer = host.steady(data[at + 14:end], _ROOM)
            if answer is None:
                state.refund(stream, length)            # declined: the general path admits it,
                stream.declined = True                 # and answers it without asking again
                if owed:
                    self._write(owed)
                break
            if owed:
                self._write(owed)
            self._traffic.bytes_in += end - at
            at = end
            state.frames += 1
            size = len(answer) + 5
            # past a window: sent as the general path sends (take also tells the PING policing DATA went out)
            if size > WRITE_CHUNK or not state.take(stream, size):
                stream.busy = True
                stream.task = eager.start(self._send_later(stream, answer))
                continue
            try:
                head = _HEADS[sid, size]    # the frame header and gRPC prefix, as grpc_frame writes them
            except KeyError:
                head = remember(_HEADS, (sid, size), grpc_frame(bytes(size - 5), sid)[:14], _KEPT)
            held = self._held
            if held is not None and size + 9 < WRITE_CHUNK and perf_counter() - self._held_since < GATHER_SECONDS:
                held.append(head + answer)  # what _write does with a small frame while gathering
            elif held is not None or self._closed:
                self._write(head + answer)
            else:                           # what _write does with a frame when nothing is held back
                self._transport.write(head + answer)
                self._traffic.bytes_out += size + 9
        if at < n:             # the rest to the general path: its answers join those held (one write)
            self._frames_received(data[at:] if at else data)
        elif held:
            self._flush_held()

    def _steady_answer(self, stream: Stream, raw: bytes) -> bytes | None:
        """The handler's steady answer to a request the general path took (it came split across reads, or
        while the stream was busy), where no steady answer was asked for it yet: each request is asked
        once, here or in :meth:`_steady_received`; None: the handler's ``handle`` answers it."""
        host = stream.steady_host
        if stream.declined:
            stream.declined = False
            return None
        if host is None or host.steady is None or type(raw) is not bytes or len(raw) >= IN_PLACE:
            return None                 # (a large request is not looked up)
        return host.steady(raw, MAX_WINDOW)

    async def _send_later(self, stream: Stream, answer: bytes) -> None:
        """Send an answer too large to write at once as the general path sends it, then answer what came
        meanwhile as the general path's answering does (it ends the turn)."""
        try:
            await self._send(stream, answer)
        except BaseException as exc:  # noqa: BLE001 - as Answering._serve: a status for this stream, or re-raised
            try:
                self._failed(stream, exc)
            finally:
                self._served(stream, True)
            return
        await self._serve(stream)
