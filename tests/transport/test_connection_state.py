"""Each end's connection state, I/O-free: bytes (or whole frames) in, events and the bytes owed out.

No socket, no event loop, no clock: :class:`~dmrpc_gym.transport.server.state.ServerState` is fed the
bytes a client would send, :class:`~dmrpc_gym.transport.client.state.ClientState` the frames a server
would send, and each is held to RFC 9113's rules by the events it gives, what it owes the peer
(``data_to_send``) and the ``ProtocolError`` that ends a connection.
"""
from __future__ import annotations

import struct

import hpack
import pytest

from dmrpc_gym.protocol.states import IllegalTransition
from dmrpc_gym.transport.client.state import ClientState
from dmrpc_gym.transport.codes import ErrorCode
from dmrpc_gym.transport.connection_state import (Data, GoAway, Headers, PeerReset, PingAcked, ResetOwed,
                                                  SettingsChanged, WindowsOpened)
from dmrpc_gym.transport.frames import (ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, IN_PLACE,
                                        PADDED, PING, PREFACE, PUSH_PROMISE, RST_STREAM, SETTINGS, U32, WINDOW_UPDATE,
                                        ProtocolError, frame, grpc_frame, read_head)
from dmrpc_gym.transport.limits import ConnectionLimits
from dmrpc_gym.transport.flow import SETTINGS_ACK
from dmrpc_gym.transport.server.state import Http1Request, ServerState, StreamRefused
from dmrpc_gym.transport.stream_states import Inbound, Outbound, rfc_state
from dmrpc_gym.transport.windows import Window

_REQUEST = hpack.Encoder().encode([(":method", "POST"), (":path", "/x"), (":scheme", "http"),
                                   (":authority", "a"), ("content-type", "application/grpc")])


class _Stream:
    """A stream of the table as the state sees it (the I/O class's stream holds more)."""

    def __init__(self, sid: int, window: int = 65535, recv: int = 65535):
        self.id, self.send, self.recv = sid, Window(window), Window(recv)
        self.inbound, self.outbound, self.held = Inbound.OPEN, Outbound.OPEN, 0


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out, at = [], 0
    while at < len(data):
        length, kind, flags, sid = read_head(data, at)
        out.append((kind, flags, sid, data[at + 9:at + 9 + length]))
        at += 9 + length
    return out


def _server(now: float = 0.0, **limits) -> ServerState:
    state = ServerState(ConnectionLimits(**limits), max_message=1 << 20, now=now)
    assert list(state.receive(PREFACE, now)) == [] and state.started
    state.data_to_send()                           # our SETTINGS (see the first test)
    return state


def _events(state: ServerState, data: bytes, now: float = 0.0) -> list:
    """The events of ``data`` (their DATA payloads copied: a view lives until the next event)."""
    events = []
    for event in state.receive(data, now):
        if type(event) is Data:
            event = Data(event.stream, event.flags, bytes(event.data))
        events.append(event)
    return events


# -- the server's state -----------------------------------------------------------------------------
def test_the_preface_owes_our_settings_and_window_and_http1_is_told_apart():
    state = ServerState(ConnectionLimits(max_streams=7), max_message=1 << 20, now=0.0)
    assert _events(state, PREFACE[:10]) == [] and not state.started and state.data_to_send() == b""
    assert _events(state, PREFACE[10:]) == [] and state.started
    kinds = [(kind, sid) for kind, _, sid, _ in _frames(state.data_to_send())]
    assert kinds == [(SETTINGS, 0), (WINDOW_UPDATE, 0)] and state.data_to_send() == b""
    http1 = ServerState(ConnectionLimits(), max_message=1 << 20, now=0.0)
    assert [type(e) for e in http1.receive(b"GET / HTTP/1.1\r\n", 0.0)] == [Http1Request]
    with pytest.raises(ProtocolError, match="did not send the HTTP/2 preface"):
        list(ServerState(ConnectionLimits(), max_message=1 << 20, now=0.0).receive(b"\x00" * 30, 0.0))


def test_a_request_is_headers_then_data_with_the_windows_debited():
    state = _server()
    (headers,) = _events(state, frame(HEADERS, END_HEADERS, 1, _REQUEST))
    assert type(headers) is Headers and headers.stream_id == 1 and headers.headers[":path"] == "/x"
    assert (state.last_stream, state.blocks, state.frames) == (1, 1, 1)
    stream = state.streams[1] = _Stream(1, recv=state.window)
    before = state.recv.size
    (data,) = _events(state, grpc_frame(b"hello", 1) + frame(DATA, END_STREAM, 1))[:1]
    assert (data.stream, data.data) == (stream, b"\x00\x00\x00\x00\x05hello")
    assert state.recv.size == before - 10 and stream.recv.size == state.window - 10 and state.frames == 3


def test_a_frame_begun_waits_in_the_state_and_a_large_one_is_given_in_pieces():
    state = _server()
    state.streams[1] = stream = _Stream(1, recv=1 << 22)
    request = grpc_frame(bytes(range(256)) * (IN_PLACE // 64), 1)
    pieces = []
    for at in range(0, len(request), 7000):       # one large DATA frame cut into reads anyhow
        for event in state.receive(request[at:at + 7000], 0.0):
            pieces.append(bytes(event.data))
        assert state.unfinished() == (None if at + 7000 >= len(request) else ("frame", 0))
    assert b"".join(pieces) == request[9:] and state.frames == 1 and state.part is None
    assert stream.recv.size == (1 << 22) - (len(request) - 9)
    small = frame(PING, 0, 0, b"12345678")
    assert _events(state, small[:5]) == [] and bytes(state.buf) == small[:5]
    assert state.unfinished() == ("frame", 1)


def test_the_stream_holds_what_was_admitted_until_consumed_or_released():
    state = _server()
    stream = state.streams[1] = _Stream(1, recv=1 << 22)
    request = grpc_frame(bytes(IN_PLACE * 2), 1)
    _events(state, request[:1000])                 # a large frame begun: admitted, and held, whole
    assert stream.held == len(request) - 9 and state.part is not None
    del state.streams[1]                           # the stream ended meanwhile: the rest is dropped
    assert _events(state, request[1000:]) == [] and state.part is None and state.frames == 1
    state.consume(stream, 100)
    assert stream.held == len(request) - 109
    state.release(stream)                          # what it held comes back to the connection
    assert stream.held == 0 and state.recv.credit == len(request) - 9      # all of it, once: under the threshold
    assert state.data_to_send() == b""


def test_padding_is_consumed_at_once_and_the_credit_comes_back_past_the_threshold():
    state = _server()
    stream = state.streams[1] = _Stream(1, recv=state.window)
    padded = frame(DATA, PADDED, 1, b"\x03" + b"abc" + b"\x00" * 3)
    (data,) = _events(state, padded)
    assert data.data == b"abc" and state.recv.credit == 4 and stream.recv.credit == 4   # pad length byte + pad
    assert stream.held == 3                       # what the session has to consume: the payload, not its padding
    state.consume(stream, state.threshold)
    owed = _frames(state.data_to_send())
    assert [(kind, sid) for kind, _, sid, _ in owed] == [(WINDOW_UPDATE, 0), (WINDOW_UPDATE, 1)]
    assert U32.unpack(owed[0][3])[0] == state.threshold + 4 and state.recv.credit == 0


@pytest.mark.parametrize("data, message", [
    (frame(DATA, 0, 9, b"x"), "DATA on idle stream 9"),
    (frame(DATA, 0, 0, b"x"), "DATA on idle stream 0"),
    (frame(HEADERS, END_HEADERS | END_STREAM, 2, _REQUEST), "stream id 2 is not a client stream"),
    (frame(WINDOW_UPDATE, 0, 0, U32.pack(0)), "WINDOW_UPDATE of 0 on the connection"),
    (frame(WINDOW_UPDATE, 0, 5, U32.pack(1)), "WINDOW_UPDATE on idle stream 5"),
    (frame(RST_STREAM, 0, 5, U32.pack(8)), "RST_STREAM on idle stream 5"),
    (frame(PUSH_PROMISE, END_HEADERS, 1, bytes(4)), "a client sent PUSH_PROMISE"),
    (frame(HEADERS, 0, 1, _REQUEST) + frame(PING, 0, 0, bytes(8)), "a frame interrupted a header block"),
    (frame(CONTINUATION, END_HEADERS, 1, b""), "CONTINUATION frame without a HEADERS"),
    ((2 << 20).to_bytes(3, "big") + bytes(6), "exceeds our SETTINGS_MAX_FRAME_SIZE"),
])
def test_what_rfc_9113_forbids_of_a_client_ends_the_connection(data, message):
    with pytest.raises(ProtocolError, match=message):
        _events(_server(), data)


def test_data_past_a_receive_window_is_a_flow_control_error():
    state = _server()
    state.streams[1] = _Stream(1, recv=3)
    with pytest.raises(ProtocolError) as err:
        _events(state, grpc_frame(b"hi", 1))
    assert err.value.code == ErrorCode.FLOW_CONTROL_ERROR and "stream 1's" in str(err.value)


def test_stream_errors_reset_only_their_stream():
    state = _server()
    state.last_stream = 3
    stream = state.streams[1] = _Stream(1)
    stream.inbound = Inbound.DONE
    (reset,) = _events(state, frame(DATA, 0, 1, b"late"))              # DATA after END_STREAM
    assert type(reset) is ResetOwed and reset.code == ErrorCode.STREAM_CLOSED
    (reset,) = _events(state, frame(WINDOW_UPDATE, 0, 1, U32.pack(0)))
    assert type(reset) is ResetOwed and reset.code == ErrorCode.PROTOCOL_ERROR and stream.send.size == 65535
    assert [type(e) for e in _events(state, frame(WINDOW_UPDATE, 0, 1, U32.pack(5)))] == [WindowsOpened]
    assert stream.send.size == 65540
    gone = _events(state, frame(WINDOW_UPDATE, 0, 3, U32.pack(5)))      # a stream already ended: no error
    assert [type(e) for e in gone] == [WindowsOpened] and state.data_to_send() == b""


def test_streams_past_the_limit_or_while_draining_are_refused():
    state = _server(max_streams=1)
    state.streams[1] = _Stream(1)
    (refused,) = _events(state, frame(HEADERS, END_HEADERS, 3, _REQUEST))
    assert type(refused) is StreamRefused and refused.limit == "max_streams" and state.last_stream == 3
    assert _frames(state.data_to_send()) == [(RST_STREAM, 0, 3, U32.pack(ErrorCode.REFUSED_STREAM))]
    state.draining = True
    (refused,) = _events(state, frame(HEADERS, END_HEADERS, 5, _REQUEST))
    assert refused.limit is None
    (trailers,) = _events(state, frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack.Encoder().encode([("a", "b")])))
    assert type(trailers) is Data and trailers.flags == END_STREAM and trailers.data == b""
    with pytest.raises(ProtocolError, match="trailers without END_STREAM"):
        _events(state, frame(HEADERS, END_HEADERS, 1, hpack.Encoder().encode([("a", "b")])))


def test_pings_are_answered_and_policed_by_the_time_passed_in():
    state = _server(min_ping_interval=10, max_ping_strikes=2)
    state.streams[1] = _Stream(1)
    ping = frame(PING, 0, 0, b"abcdefgh")
    for now in (0.0, 1.0, 2.0):
        assert _events(state, ping, now) == []
    assert state.strikes == 2 and state.data_to_send() == frame(PING, ACK, 0, b"abcdefgh") * 3
    state.answered = True                              # DATA went out: the strikes are forgiven
    assert _events(state, ping, 3.0) == [] and state.strikes == 0
    for now in (4.0, 5.0):
        _events(state, ping, now)
    with pytest.raises(ProtocolError, match="too_many_pings"):
        _events(state, ping, 6.0)
    acked = _server()
    acked.data_to_send()
    assert [type(e) for e in _events(acked, frame(PING, ACK, 0, bytes(8)))] == [PingAcked]
    assert acked.data_to_send() == b""                 # an ACK: no answer owed


def test_rapid_resets_end_the_connection():
    state = _server(max_resets=2)
    state.last_stream = 99
    for sid in (1, 3):
        state.streams[sid] = _Stream(sid)
        (reset,) = _events(state, frame(RST_STREAM, 0, sid, U32.pack(8)), now=0.5)
        assert type(reset) is PeerReset and reset.code == 8
        del state.streams[sid]
    state.streams[5] = _Stream(5)
    with pytest.raises(ProtocolError, match="more than 2 stream resets in a second"):
        _events(state, frame(RST_STREAM, 0, 5, U32.pack(8)), now=0.9)


def test_deadlines_are_told_from_the_times_passed_in():
    fresh = ServerState(ConnectionLimits(handshake_timeout=5), max_message=1 << 20, now=100.0)
    assert fresh.overdue(104.0) is None and "no HTTP/2 preface within 5 s" in fresh.overdue(106.0)
    state = _server(now=0.0, frame_timeout=10, idle_timeout=30)
    _events(state, frame(PING, 0, 0, bytes(8))[:4])
    assert state.overdue(1.0) is None and state.overdue(5.0) is None
    assert "a frame begun 10 s ago is still unfinished" in state.overdue(11.5)
    idle = _server(now=0.0, idle_timeout=30)
    assert idle.overdue(29.0) is None and "no open stream for 30 s" in idle.overdue(31.0)
    idle.erred()
    assert not idle.dropped(1000) and idle.dropped(1 << 20)


# -- the client's state -----------------------------------------------------------------------------
def test_the_client_acknowledges_settings_and_pings_and_reports_the_rest():
    state = ClientState()
    stream = state.streams[1] = _Stream(1)
    state.next_id = 3
    assert type(state.frame(SETTINGS, 0, 0, struct.pack(">HL", 4, 65535 + 10))) is SettingsChanged
    assert stream.send.size == 65545 and _frames(state.data_to_send()) == [(SETTINGS, ACK, 0, b"")]
    assert state.frame(SETTINGS, ACK, 0, b"") is None and state.data_to_send() == b""
    assert state.frame(PING, 0, 0, b"12345678") is None
    assert state.data_to_send() == frame(PING, ACK, 0, b"12345678")
    assert type(state.frame(PING, ACK, 0, b"12345678")) is PingAcked and state.data_to_send() == b""
    reset = state.frame(RST_STREAM, 0, 1, U32.pack(2))
    assert type(reset) is PeerReset and reset.stream is stream and state.frame(RST_STREAM, 0, 7, U32.pack(2)) is None
    away = state.frame(GOAWAY, 0, 0, struct.pack(">LL", 1, 0) + b"bye")
    assert type(away) is GoAway and (away.last_stream, away.code, away.debug) == (1, 0, "bye")
    block = hpack.Encoder().encode([(":status", "200")])
    assert state.frame(HEADERS, 0, 1, block[:1]) is None and state.headers_in.data is not None
    headers = state.frame(CONTINUATION, END_HEADERS, 1, block[1:])
    assert type(headers) is Headers and headers.headers == {":status": "200"} and state.blocks == 1


@pytest.mark.parametrize("kind, flags, sid, payload, message", [
    (HEADERS, END_HEADERS, 3, b"", "HEADERS on stream 3, which this client did not open"),
    (HEADERS, END_HEADERS, 2, b"", "HEADERS on stream 2, which this client did not open"),
    (PUSH_PROMISE, END_HEADERS, 1, bytes(4), "the server pushed a stream we disabled"),
    (WINDOW_UPDATE, 0, 0, U32.pack(0), "WINDOW_UPDATE of 0 on the connection"),
    (PING, 0, 0, bytes(7), "a PING frame of 7 bytes"),
    (SETTINGS, 0, 0, struct.pack(">HL", 5, 100), "SETTINGS"),
])
def test_what_rfc_9113_forbids_of_a_server_ends_the_connection(kind, flags, sid, payload, message):
    state = ClientState()
    state.next_id = 3
    with pytest.raises(ProtocolError, match=message):
        state.frame(kind, flags, sid, payload)


def test_the_client_credits_what_it_receives_once_half_its_window_is_in():
    state, stream = ClientState(threshold=100), _Stream(1, recv=1000)
    assert state.received(stream, 60) == b""
    owed = _frames(state.received(stream, 60))
    assert [(kind, sid, U32.unpack(p)[0]) for kind, _, sid, p in owed] == [(WINDOW_UPDATE, 0, 120),
                                                                        (WINDOW_UPDATE, 1, 120)]
    assert (stream.recv.size, stream.recv.credit) == (1000, 0)


def _started_client(**kwargs) -> ClientState:
    """A client's state past the server's first SETTINGS (what its handshake takes)."""
    state = ClientState(**kwargs)
    assert [type(e) for e in state.receive(frame(SETTINGS, 0, 0, b""))] == [SettingsChanged] and state.started
    state.data_to_send()
    return state


def test_the_client_takes_any_chunks_and_gives_the_events_of_every_whole_frame_in_them():
    state = ClientState()
    pings = [frame(PING, 0, 0, bytes([i]) * 8) for i in range(3)]
    data = frame(SETTINGS, 0, 0, b"") + b"".join(pings) + frame(PING, 1, 0, b"abcdefgh")
    for size in (1, 5, 9, 17, 40, len(data)):
        state, events = ClientState(), []
        for at in range(0, len(data), size):
            events += list(state.receive(data[at:at + size]))
        assert [type(e) for e in events] == [SettingsChanged, PingAcked] and state.frames == 5 and not state.buf
        assert state.data_to_send() == SETTINGS_ACK + b"".join(frame(PING, 1, 0, bytes([i]) * 8) for i in range(3))


def test_the_client_handshake_takes_the_settings_alone_and_checks_they_come_first():
    state = ClientState()
    rest = frame(PING, 0, 0, b"12345678")
    assert [type(e) for e in state.receive(frame(SETTINGS, 0, 0, b"") + rest, one=True)] == [SettingsChanged]
    assert bytes(state.buf) == rest and state.ready()       # what follows the SETTINGS waits
    with pytest.raises(ConnectionError, match="speaks HTTP/1.x"):
        list(ClientState().receive(b"HTTP/1.1 400 Bad Request\r\n"))
    with pytest.raises(ProtocolError, match="first frame is of type 6, not SETTINGS"):
        list(ClientState().receive(rest))
    assert list(ClientState().receive(frame(SETTINGS, 0, 0, b"")[:8])) == []     # not 9 bytes yet: it waits


def test_the_client_reads_a_large_data_frame_in_place_and_admits_it_whole_at_its_end():
    state = _started_client()
    stream = state.streams[1] = _Stream(1, recv=1 << 30)
    body = bytes(IN_PLACE * 2)
    data = frame(DATA, END_STREAM, 1, body)
    state.buf += data[:1000]
    assert state.ready()                                      # the rest is to be read in place
    (first,) = [Data(e.stream, e.flags, bytes(e.data)) for e in state.receive()]
    assert first.stream is stream and first.data == body[:991] and not first.flags & END_STREAM
    assert state.part == [stream, END_STREAM, len(body), len(body) - 991] and not state.buf
    assert stream.recv.size == 1 << 30                         # admitted only once it is all read
    assert state.part_read(100) is None and state.part[3] == 100
    end = state.part_read(0)
    assert type(end) is Data and end.flags == END_STREAM and end.data == b"" and state.part is None
    assert stream.recv.size == (1 << 30) - len(body) and state.frames == 2      # (after the SETTINGS)
    small = frame(DATA, 0, 1, b"x" * 100)
    state.buf += small[:50]
    assert not state.ready() and list(state.receive()) == []   # a small frame waits to be whole
    assert bytes(state.buf) == small[:50]


def test_the_client_takes_data_by_its_stream_credits_a_closed_one_and_refuses_stream_0():
    state = _started_client(threshold=10)
    stream = state.streams[1] = _Stream(1)
    state.next_id = 5
    state.buf += frame(DATA, PADDED, 1, b"\x02ab\x00\x00") + frame(DATA, 0, 3, b"z" * 20)
    events = list(state.receive())
    assert [(type(e), e.data) for e in events] == [(Data, b"ab")]   # stream 3: closed, its bytes dropped
    owed = _frames(state.data_to_send())
    assert [(kind, sid) for kind, _, sid, _ in owed] == [(WINDOW_UPDATE, 0)]   # the connection's credit: 25
    assert U32.unpack(owed[0][3])[0] == 25 and stream.recv.credit == 5 and state.frames == 3   # (SETTINGS first)
    state.buf += frame(DATA, 0, 0, b"x")
    with pytest.raises(ProtocolError, match="a DATA frame on stream 0"):
        list(state.receive())


# -- the stream-state tables --------------------------------------------------------------------------
def test_both_ends_streams_move_by_one_table():
    # the server's stream begins with the client's HEADERS; the client's with its own
    server = (Inbound.OPEN, Outbound.FRESH)
    client = (Inbound.FRESH, Outbound.OPEN)
    assert rfc_state(*server) == rfc_state(*client) == "open"
    assert rfc_state(Inbound.FRESH, Outbound.FRESH) == "idle"
    assert rfc_state(Inbound.OPEN, Outbound.ENDED) == "half-closed (local)"
    assert rfc_state(Inbound.DONE, Outbound.ENDED) == "closed"
    assert Inbound.FRESH.to(Inbound.DONE) is Inbound.DONE                 # a trailers-only answer
    with pytest.raises(IllegalTransition, match="from OPEN to FRESH"):
        Inbound.OPEN.to(Inbound.FRESH)
    with pytest.raises(IllegalTransition, match="from ENDED to OPEN"):
        Outbound.ENDED.to(Outbound.OPEN)


def test_the_io_classes_leave_the_frames_to_their_state():
    """Frames are read by the states alone (and by the steady paths, which read a frame they take
    whole): the I/O classes of either end name no frame decoder."""
    import pathlib
    transport = pathlib.Path(__file__).resolve().parents[2] / "dmrpc_gym" / "transport"
    io = ["server/protocol.py", "server/requests.py", "server/replies.py", "server/answering.py",
          "server/deadlines.py", "client/connection.py", "client/control.py", "client/large_messages.py",
          "client/keepalive.py", "client/stream.py"]
    for name in io:
        source = (transport / name).read_text()
        assert not any(decoder in source for decoder in ("read_head", "check_frame", "parse_settings",
                                                          "from_bytes")), name


# -- framing header blocks (the state's HPACK encoder) ------------------------------------------------
def test_both_ends_frame_their_header_blocks_by_the_peers_settings():
    server = ServerState(ConnectionLimits(), max_message=1 << 20, now=0.0)
    fields = [(":status", "200"), ("x-long", "v" * 40000)]
    raw = server.frame_headers(1, fields, end_stream=True)
    frames = _frames(raw)
    assert [kind for kind, *_ in frames] == [HEADERS, CONTINUATION, CONTINUATION]     # 16384 a frame, by default
    assert frames[0][1] & END_STREAM and not frames[0][1] & END_HEADERS and frames[-1][1] & END_HEADERS
    assert hpack.Decoder().decode(b"".join(p for *_, p in frames)) == fields
    client = ClientState()
    settings = struct.pack(">HL", 1, 0) + struct.pack(">HL", 5, 1 << 20) + struct.pack(">HL", 6, 100)
    list(client.receive(frame(SETTINGS, 0, 0, settings)))       # table 0, frames of 1 MiB, lists of 100 bytes
    assert client.encoder.header_table_size == 0
    sid, opening = client.frame_request([(":path", "/x")])
    assert (sid, client.next_id) == (1, 3) and [k for k, *_ in _frames(opening)] == [HEADERS]
    with pytest.raises(ValueError, match="SETTINGS_MAX_HEADER_LIST_SIZE of 100"):
        client.frame_request([("x", "y" * 100)])
    assert client.next_id == 3                                  # no id taken by a refused request
