"""The server's steady-state requests: whole small requests at the start of a read, answered at once.

The fast path of :class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol`'s ``data_received``:
when what one read brought begins with whole DATA frames, each holding one whole gRPC message on an
open, idle stream whose handler has a synchronous answer for it (a ``steady(message, room)`` that
returns the answer's bytes, or None to decline before doing anything), :func:`take` answers them in
the same turn, a frame each, skipping the frame loop, the splitter, the inbox, the answering coroutine
and the general send; the general path reads whatever follows the first frame it cannot take. The
requests of a vector env's sub-envs on one connection come so, several in one read: their answers are
gathered into one write, as the general path gathers them. What it does to the connection (flow-control
windows and credit, the frame count, the traffic counters, the conduct's note of an answer) is what the
general path does. ``GrpcProtocol`` stays the reference.

What it assumes (anything else is left to the general path, untouched):

- nothing buffered before this read, the preface read, no header block open, the connection not lingering;
- each frame is a whole DATA frame (no flags: not padded, not END_STREAM) within both receive windows, on a
  stream whose client may still send (``Inbound.OPEN``) and to which response headers went
  (``Outbound.REPLIED``), of a method answering one message a request, not answering now, with nothing
  queued, no message part way through its splitter, and no compression either way;
- the message is uncompressed and within the stream's message limit;
- the transport is writable. An answer that fits one frame, the send windows and a write chunk (``room``)
  is written at once; a larger one (an unusual step: a large ``info``) goes out as the general path
  sends, awaiting the windows, with the stream busy meanwhile (requests that come then wait their turn).

The env call an answer makes runs inline, as the general path runs a short step (see
:mod:`dmrpc_gym.server.running.workers`); a handler declines where the general path would hand it to a thread.
"""
from __future__ import annotations

from typing import Any

from dmrpc_gym.transport.frames import DATA, WRITE_CHUNK, grpc_frame
from dmrpc_gym.transport.server import eager
from dmrpc_gym.transport.server.requests import CREDIT_AT
from dmrpc_gym.transport.server.stream import Inbound, Outbound

_OPEN, _REPLIED = Inbound.OPEN, Outbound.REPLIED
_HEADS: dict[tuple[int, int], bytes] = {}     # (stream id, DATA payload size) -> the 14 bytes before a message
_KEPT = 4096

__all__ = ["take"]


def take(p: Any, data: bytes) -> bytes:
    """Answer the whole DATA frames that begin ``data`` (one read of protocol ``p``, a GrpcProtocol) on the
    steady path, while each is a steady request: the rest of ``data`` (empty: all of it answered)."""
    if p._lingering or not p._preface or p._headers_in.data is not None:
        return data
    n, at, held = len(data), 0, False
    while n - at >= 14:
        if data[at + 3] != DATA or data[at + 4] or data[at + 9]:
            break
        length = (data[at] << 16) | (data[at + 1] << 8) | data[at + 2]
        end = at + 9 + length
        if end > n or ((data[at + 10] << 24) | (data[at + 11] << 16) | (data[at + 12] << 8) | data[at + 13]) \
                != length - 5:
            break
        try:
            stream = p._streams[((data[at + 5] & 0x7F) << 24) | (data[at + 6] << 16) | (data[at + 7] << 8)
                                | data[at + 8]]
        except KeyError:
            break
        splitter = stream.splitter
        if (stream.busy or stream.inbox or stream.inbound is not _OPEN or stream.outbound is not _REPLIED
                or stream.many or stream.compress is not None or splitter._data or splitter._big is not None
                or length - 5 > splitter.limit or length > p._recv_window or length > stream.recv_window
                or not p._writable):
            break
        host = stream.steady_host       # (a handler without a steady answer: the general path only)
        if host is None or host.steady is None:
            break
        room = stream.send_window       # the least of the send windows, the peer's frame and a write chunk
        if p._send_conn < room:
            room = p._send_conn
        if p._peer.max_frame < room:
            room = p._peer.max_frame
        if WRITE_CHUNK < room:
            room = WRITE_CHUNK
        room -= 5
        if end < n and not held:        # several requests in one read: their answers go out together,
            p._hold()                   # as the general path gathers them
            held = True
        answer = host.steady(data[at + 14:end], room)
        if answer is None:
            break
        # What data_received, _on_data, _serve, _consumed and _send do for this request and its answer, in order.
        p._traffic.bytes_in += end - at
        at = end
        p._recv_window -= length
        stream.recv_window -= length
        p._frames_done += 1
        p._credit += length             # _consumed's credit (stream.held: up by length and down again)
        stream.credit += length
        if p._credit >= CREDIT_AT or stream.credit >= CREDIT_AT:
            p._consumed(stream, 0)      # its WINDOW_UPDATEs, as it writes them
        size = len(answer) + 5
        if size > room + 5:
            stream.busy = True
            stream.task = eager.start(_send_later(p, stream, answer))
            continue
        p._conduct.answered = True
        stream.send_window -= size
        p._send_conn -= size
        try:
            head = _HEADS[stream.id, size]   # the frame header and gRPC prefix, as grpc_frame writes them
        except KeyError:
            head = grpc_frame(bytes(size - 5), stream.id)[:14]
            if len(_HEADS) < _KEPT:
                _HEADS[stream.id, size] = head
        if p._held is not None or p._closed:
            p._write(head + answer)
        else:                           # what _write does with a frame when nothing is held back
            p._transport.write(head + answer)
            p._traffic.bytes_out += size + 9
    if held:
        p._flush_held()
    return data[at:] if at else data


async def _send_later(p: Any, stream: Any, answer: bytes) -> None:
    """Send an answer too large to write at once as the general path sends it, then answer what came
    meanwhile as the general path's answering does (it ends the turn)."""
    try:
        await p._send(stream, answer)
    except BaseException as exc:  # noqa: BLE001 - as Answering._serve: a status for this stream, or re-raised
        try:
            p._failed(stream, exc)
        finally:
            p._served(stream, True)
        return
    await p._serve(stream)
