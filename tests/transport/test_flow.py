"""RFC 9113's flow-control and SETTINGS rules (transport/flow.py), alone and at both ends of a real connection."""
from __future__ import annotations

import socket
import struct
import threading

import pytest
import servers
from raw_h2 import RawClient, data, message

from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport.client.h2_transport import H2Transport
from dmrpc_gym.transport.codes import ErrorCode
from dmrpc_gym.transport.flow import Flow, PeerSettings, StreamReset, Window
from dmrpc_gym.transport.frames import (DATA, GOAWAY, HEADER, MAX_WINDOW, RST_STREAM, SETTINGS, U32, WINDOW_UPDATE,
                                        ProtocolError, frame)
from dmrpc_gym.worlds.catch import Catch


class _Stream:
    def __init__(self, sid: int, window: int):
        self.id, self.send = sid, Window(window)


# -- the rules alone ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sid, raised", [(0, ProtocolError), (5, StreamReset)])
def test_a_zero_increment_is_a_protocol_error_of_the_connection_or_of_the_stream(sid, raised):
    window = Window(100)
    with pytest.raises(raised) as err:
        window.opened(0, sid)
    assert window.size == 100 and err.value.code == ErrorCode.PROTOCOL_ERROR and "WINDOW_UPDATE of 0" in str(err.value)


@pytest.mark.parametrize("sid, raised", [(0, ProtocolError), (5, StreamReset)])
def test_an_increment_past_the_largest_window_is_a_flow_control_error(sid, raised):
    window = Window(MAX_WINDOW - 10)
    window.opened(10, sid)                                            # exactly the largest window: allowed
    assert window.size == MAX_WINDOW
    window.size -= 10
    with pytest.raises(raised) as err:
        window.opened(11, sid)
    assert window.size == MAX_WINDOW - 10 and err.value.code == ErrorCode.FLOW_CONTROL_ERROR and "2**31-1" in str(err.value)


def test_a_new_initial_window_moves_every_open_stream_by_the_change():
    peer, streams = PeerSettings(), [_Stream(1, 10), _Stream(3, 65535)]
    peer.apply(struct.pack(">HL", 4, 65535 + 1000), streams)
    assert [s.send.size for s in streams] == [1010, 66535] and peer.initial_window == 66535
    peer.apply(struct.pack(">HL", 4, 0), streams)                    # may go negative (RFC 9113 6.9.2)
    assert [s.send.size for s in streams] == [-65525, 0]


def test_a_new_initial_window_that_overflows_a_stream_ends_the_connection():
    with pytest.raises(ProtocolError) as err:
        PeerSettings().apply(struct.pack(">HL", 4, 1 << 20), [_Stream(7, MAX_WINDOW)])
    assert err.value.code == ErrorCode.FLOW_CONTROL_ERROR and "stream 7" in str(err.value)


@pytest.mark.parametrize("key, value, code", [(2, 2, ErrorCode.PROTOCOL_ERROR), (4, 2**31, ErrorCode.FLOW_CONTROL_ERROR),
                                              (5, 100, ErrorCode.PROTOCOL_ERROR), (5, 1 << 24, ErrorCode.PROTOCOL_ERROR)])
def test_settings_values_rfc_9113_forbids_are_connection_errors(key, value, code):
    with pytest.raises(ProtocolError) as err:
        PeerSettings().apply(struct.pack(">HL", key, value), [])
    assert err.value.code == code


class _Both:
    def __init__(self, sid: int = 1, window: int = 1000):
        self.id, self.send, self.recv = sid, Window(65535), Window(window)

    def state(self) -> tuple:
        return self.send.size, self.recv.size, self.recv.credit


def _state(flow: Flow, stream: _Both) -> tuple:
    return flow.send.size, flow.recv.size, flow.recv.credit, stream.state()


def test_data_past_a_receive_window_is_a_flow_control_error_that_changes_nothing():
    for flow, stream, where in [(Flow(100, 50), _Both(window=1000), "the connection's"),
                                (Flow(1000, 50), _Both(3, window=100), "stream 3's")]:
        before = _state(flow, stream)
        with pytest.raises(ProtocolError) as err:
            flow.received(stream, 101)
        assert err.value.code == ErrorCode.FLOW_CONTROL_ERROR and where in str(err.value)
        assert _state(flow, stream) == before


@pytest.mark.parametrize("n", [10, 60, 200])
def test_a_declined_steady_frame_refunded_leaves_the_state_the_general_path_makes(n):
    """The steady path admits and consumes a frame at once, then refunds it when its handler declines: the
    general path then admits it, and consumes it when the request is taken. The windows, the credit and the
    WINDOW_UPDATEs owed in all are those of the general path alone."""
    general, g_stream = Flow(1000, 100), _Both(window=1000)
    owed_general = general.consumed(30, g_stream)
    general.admit(n, g_stream)
    owed_general += general.consumed(n, g_stream)
    steady, s_stream = Flow(1000, 100), _Both(window=1000)
    owed_steady = steady.consumed(30, s_stream)
    owed_steady += steady.received(s_stream, n)
    steady.refund(s_stream, n)
    steady.admit(n, s_stream)
    owed_steady += steady.consumed(n, s_stream)
    granted = lambda owed: sum(U32.unpack_from(owed, i + 9)[0] for i in range(0, len(owed), 13))
    assert granted(owed_steady) == granted(owed_general)
    # what each side lets the peer send: the windows plus what was granted and not yet counted there
    assert (steady.recv.size + steady.recv.credit, s_stream.recv.size + s_stream.recv.credit) == \
           (general.recv.size + general.recv.credit, g_stream.recv.size + g_stream.recv.credit)


def test_settings_remembered_by_name():
    peer = PeerSettings()
    assert (peer.max_streams, peer.max_header_list, peer.max_frame) == (None, None, 16384)
    peer.apply(struct.pack(">HLHLHLHL", 3, 8, 6, 4096, 5, 1 << 20, 1, 0), [])
    assert (peer.max_streams, peer.max_header_list, peer.max_frame, peer.header_table) == (8, 4096, 1 << 20, 0)


# -- the server's end ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch)
    yield server
    server.stop()


def _reset_code(raw: RawClient, sid: int) -> int | None:
    while (got := raw.next_frame()) is not None:
        kind, _, stream, payload = got
        if kind == RST_STREAM and stream == sid:
            return U32.unpack(payload)[0]
    return None


@pytest.mark.parametrize("increment, code", [(0, ErrorCode.PROTOCOL_ERROR),
                                             (MAX_WINDOW, ErrorCode.FLOW_CONTROL_ERROR)])
def test_the_server_resets_only_the_stream_a_bad_window_update_names(catch, increment, code):
    raw = RawClient(catch.address, timeout=10)
    try:
        raw.send(raw.request_headers(1) + frame(WINDOW_UPDATE, 0, 1, U32.pack(increment)))
        assert _reset_code(raw, 1) == code
        raw.send(raw.request_headers(3) + data(3, message(pb.EnvironmentRequest(create_world=pb.CreateWorldRequest())),
                                              end=True))
        assert raw.trailers(3)["grpc-status"] == "0" and raw.answers      # the connection goes on
    finally:
        raw.close()


# -- the client's end ---------------------------------------------------------------------------------
def _client_against(frames_after_request: bytes) -> tuple[str, list[tuple[int, int, int]]]:
    """What our client's read raises when a raw server answers its first request with the given frames,
    and the frames ``(kind, stream, first 32 bits of the payload)`` the server then received."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    seen: list[tuple[int, int, int]] = []

    def serve() -> None:
        peer, _ = listener.accept()
        peer.settimeout(5)
        buf = b""
        try:
            peer.sendall(frame(SETTINGS, 0, 0))
            answered = False
            while True:                        # until our client closes (EOF), or 5 s of silence
                chunk = peer.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if buf.startswith(b"PRI * HTTP/2.0"):
                    buf = buf[24:]
                while len(buf) >= 9:
                    hi, lo, kind, _, sid = HEADER.unpack_from(buf)
                    end = 9 + ((hi << 16) | lo)
                    if len(buf) < end:
                        break
                    seen.append((kind, sid, U32.unpack_from(buf, 9)[0] if end - 9 >= 4 else -1))
                    buf = buf[end:]
                    if kind == DATA and not answered:
                        answered = True
                        peer.sendall(frames_after_request)
        except OSError:
            pass
        finally:
            peer.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    transport = H2Transport(f"127.0.0.1:{listener.getsockname()[1]}", (), 5.0)
    try:
        transport.write(pb.EnvironmentRequest(step=pb.StepRequest()).SerializeToString())
        with pytest.raises(Exception) as raised:
            transport.read(5.0)
        transport.close()
    finally:
        thread.join(10)
        listener.close()
    return f"{type(raised.value).__name__}: {raised.value}", seen


@pytest.mark.parametrize("increment, code", [(0, ErrorCode.PROTOCOL_ERROR),
                                             (MAX_WINDOW, ErrorCode.FLOW_CONTROL_ERROR)])
def test_the_client_resets_only_the_stream_a_bad_window_update_names(increment, code):
    raised, seen = _client_against(frame(WINDOW_UPDATE, 0, 1, U32.pack(increment)))
    assert raised.startswith("StreamEnded") and "flow control" in raised
    assert (RST_STREAM, 1, code) in seen
    assert not any(kind == GOAWAY for kind, _, _ in seen)                   # no GOAWAY: the connection was not at fault


@pytest.mark.parametrize("increment, code", [(0, ErrorCode.PROTOCOL_ERROR),
                                             (MAX_WINDOW, ErrorCode.FLOW_CONTROL_ERROR)])
def test_the_client_ends_the_connection_for_a_bad_connection_window_update(increment, code):
    raised, seen = _client_against(frame(WINDOW_UPDATE, 0, 0, U32.pack(increment)))
    assert raised.startswith("ConnectionError")
    assert any(kind == GOAWAY for kind, _, _ in seen)                       # GOAWAY
