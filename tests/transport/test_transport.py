"""The transport as an HTTP/2 + gRPC peer: GOAWAY, encodings, CONTINUATION, size limits,
protocol errors, HTTP/1.x peers, TLS and tokens (our client and server, grpcio, raw frames)."""
from __future__ import annotations

import http.server
import socket
import struct
import threading

import grpc
import numpy as np
import pytest
import servers
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb
from interop_peers import self_signed
from raw_h2 import LARGE_HEADERS, RawClient, data, message

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import METHOD_PATH, pb
from dmrpc_gym.server import Server
from dmrpc_gym.transport.frames import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    U32,
    WINDOW_UPDATE,
    frame,
)
from dmrpc_gym.worlds.catch import Catch

PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR = 1, 3, 6
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL, UNAUTHENTICATED = 8, 12, 13, 16


@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch, limits=LARGE_HEADERS)     # some tests send 32-40 KB header lists
    yield server
    server.stop()


def create() -> pb.EnvironmentRequest:
    return pb.EnvironmentRequest(create_world=pb.CreateWorldRequest())


# -- 2. GOAWAY both ways ----------------------------------------------------------------------
def test_a_client_goaway_lets_its_open_stream_finish(catch):
    raw = RawClient(catch.address)
    try:
        raw.send(raw.request_headers(1) + data(1, message(create())))
        raw.send(frame(GOAWAY, 0, 0, struct.pack(">LL", 0, 0)))     # the client is going away
        raw.send(data(1, message(create()), end=True))              # ... but its stream goes on
        trailers = raw.trailers(1)
        assert trailers["grpc-status"] == "0"
        assert len(raw.answers) == 2                                 # both requests answered
    finally:
        raw.close()


def test_a_graceful_server_stop_lets_a_stepping_client_finish():
    server = servers.start(Catch)
    env = DmRpcEnv(server.address)
    env.reset(seed=0)
    stopper = threading.Thread(target=server.stop, kwargs={"grace": 30})
    stopper.start()
    try:
        for _ in range(20):                      # the server said GOAWAY (last stream = ours)
            env.step(np.int8(0))
    finally:
        env.close()
        stopper.join(30)
    assert not stopper.is_alive()


# -- 3. encodings ---------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_grpcio_compressed_requests_are_served(catch, compression):
    with grpc.insecure_channel(catch.address, compression=compression) as channel:
        call = channel.stream_stream(METHOD_PATH, request_serializer=pb.EnvironmentRequest.SerializeToString,
                                     response_deserializer=pb.EnvironmentResponse.FromString)
        answers = list(call(iter([create(), create()]), timeout=20))
    assert [a.WhichOneof("payload") for a in answers] == ["create_world", "create_world"]


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
def test_our_client_compresses_both_ways(catch, compression):
    env = DmRpcEnv(catch.address, compression=compression)
    try:
        obs, _ = env.reset(seed=3)
        assert obs.shape == (10, 10)
        for _ in range(5):
            env.step(np.int8(1))
    finally:
        env.close()


def test_an_unknown_encoding_is_unimplemented_and_names_what_is_accepted(catch):
    raw = RawClient(catch.address)
    try:
        raw.send(raw.request_headers(1, (("grpc-encoding", "snappy"),)) + data(1, message(create()), end=True))
        trailers = raw.trailers(1)
        assert trailers["grpc-status"] == str(UNIMPLEMENTED)
        assert "gzip" in trailers["grpc-accept-encoding"] and "snappy" in trailers["grpc-message"]
    finally:
        raw.close()


def test_compression_is_checked():
    with pytest.raises(ValueError, match="compression='br'"):
        Connection("127.0.0.1:1", compression="br")


# -- 4. CONTINUATION ------------------------------------------------------------------------------
def test_a_header_block_larger_than_a_frame_goes_in_continuations(catch):
    raw = RawClient(catch.address)
    try:                                    # our server's trailers: the message names a 40 KB path
        raw.send(raw.request_headers(1, path="/" + "x" * 40_000) + data(1, b"", end=True))
        kinds = []
        while True:
            kind, flags, sid, payload = raw.next_frame()
            if sid == 1:
                kinds.append(kind)
                assert len(payload) <= 16384           # our SETTINGS_MAX_FRAME_SIZE is the default
                if flags & END_HEADERS:
                    break
        assert kinds[0] == HEADERS and set(kinds[1:]) == {CONTINUATION}
    finally:
        raw.close()


def test_32kb_of_metadata_travels_both_ways(catch):
    with Connection(catch.address, metadata=[("x-long-token", "t" * 32_000)]) as conn:
        assert conn.send(pb.CreateWorldRequest()).world_name


# -- 5. message size limits --------------------------------------------------------------------------
def test_the_server_refuses_an_oversized_message_from_its_prefix_alone():
    server = servers.start(Catch, max_message_size=1 << 20)
    raw = RawClient(server.address)
    try:   # declares 2 GiB, sends 100 bytes of it: the answer must come without the rest
        raw.send(raw.request_headers(1) + data(1, b"\x00" + U32.pack(2**31) + bytes(100)))
        trailers = raw.trailers(1)
        assert trailers["grpc-status"] == str(RESOURCE_EXHAUSTED)
        assert "2147483648" in trailers["grpc-message"] and "1048576" in trailers["grpc-message"]
    finally:
        raw.close()
        server.stop()


def test_the_server_limit_is_a_dmrpc_error_for_our_client():
    server = servers.start(Catch, max_message_size=64)
    try:
        with Connection(server.address) as conn:
            with pytest.raises(DmRpcError, match="RESOURCE_EXHAUSTED.*exceeds the maximum message size of 64"):
                conn.send(pb.CreateWorldRequest(settings={"seed": pb.Tensor(
                    int64s=pb.Tensor.Int64Array(array=list(range(100))))}))
    finally:
        server.stop()


def test_our_client_refuses_an_oversized_answer_naming_its_size(catch):
    with Connection(catch.address, max_message_size=50) as conn:
        world = conn.send(pb.CreateWorldRequest()).world_name
        with pytest.raises(DmRpcError, match=r"RESOURCE_EXHAUSTED.*of \d+ bytes exceeds the maximum message size of 50"):
            conn.send(pb.JoinWorldRequest(world_name=world))


# -- 6. protocol errors -----------------------------------------------------------------------------
MALFORMED = {
    "DATA on stream 0": (frame(DATA, 0, 0, b"x"), PROTOCOL_ERROR),
    "HEADERS on stream 0": (frame(HEADERS, END_HEADERS, 0, b""), PROTOCOL_ERROR),
    "SETTINGS of 5 bytes": (frame(SETTINGS, 0, 0, bytes(5)), FRAME_SIZE_ERROR),
    "SETTINGS ACK with a payload": (frame(SETTINGS, 1, 0, bytes(6)), FRAME_SIZE_ERROR),
    "SETTINGS on stream 1": (frame(SETTINGS, 0, 1, b""), PROTOCOL_ERROR),
    "SETTINGS_MAX_FRAME_SIZE 100": (frame(SETTINGS, 0, 0, struct.pack(">HL", 5, 100)), PROTOCOL_ERROR),
    "SETTINGS_INITIAL_WINDOW_SIZE 2**31": (frame(SETTINGS, 0, 0, struct.pack(">HL", 4, 2**31)), FLOW_CONTROL_ERROR),
    "WINDOW_UPDATE of 0": (frame(WINDOW_UPDATE, 0, 0, U32.pack(0)), PROTOCOL_ERROR),
    "WINDOW_UPDATE overflowing": (frame(WINDOW_UPDATE, 0, 0, U32.pack(2**31 - 1)), FLOW_CONTROL_ERROR),
    "WINDOW_UPDATE of 3 bytes": (frame(WINDOW_UPDATE, 0, 0, bytes(3)), FRAME_SIZE_ERROR),
    "PING of 7 bytes": (frame(PING, 0, 0, bytes(7)), FRAME_SIZE_ERROR),
    "PING on stream 1": (frame(PING, 0, 1, bytes(8)), PROTOCOL_ERROR),
    "stray CONTINUATION": (frame(CONTINUATION, END_HEADERS, 1, b""), PROTOCOL_ERROR),
    "RST_STREAM of 3 bytes": (frame(RST_STREAM, 0, 1, bytes(3)), FRAME_SIZE_ERROR),
    "GOAWAY of 4 bytes": (frame(GOAWAY, 0, 0, bytes(4)), FRAME_SIZE_ERROR),
    "PUSH_PROMISE from a client": (frame(PUSH_PROMISE, END_HEADERS, 1, bytes(4)), PROTOCOL_ERROR),
    "HEADERS on an even stream": (frame(HEADERS, END_HEADERS, 2, b"\x82"), PROTOCOL_ERROR),
    "a frame over our SETTINGS_MAX_FRAME_SIZE": (frame(0xFA, 0, 0, bytes((1 << 20) + 1)), FRAME_SIZE_ERROR),
    "a PING inside a header block": (frame(HEADERS, 0, 1, b"\x83") + frame(PING, 0, 0, bytes(8)), PROTOCOL_ERROR),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_frames_end_the_connection_with_the_rfc_error_code(catch, name):
    bad, code = MALFORMED[name]
    raw = RawClient(catch.address)
    try:
        raw.send(bad)
        got = raw.goaway()
        assert got is not None, f"{name}: closed without GOAWAY"
        assert got[0] == code, f"{name}: GOAWAY code {got[0]} ({got[1]}), expected {code}"
    finally:
        raw.close()


def test_a_compressed_flag_without_encoding_resets_that_stream_only(catch):
    raw = RawClient(catch.address)
    try:
        raw.send(raw.request_headers(1) + data(1, message(create(), flag=1)))
        trailers = raw.trailers(1)
        assert trailers["grpc-status"] == str(INTERNAL)
        raw.send(raw.request_headers(3) + data(3, message(create()), end=True))   # the connection lives on
        assert raw.trailers(3)["grpc-status"] == "0" and raw.answers
    finally:
        raw.close()


def test_the_server_answers_an_http1_request_at_once(catch):
    host, port = catch.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")          # shorter than the HTTP/2 preface
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 505 ") and b"HTTP/2" in answer


def test_our_client_recognises_an_http1_server_at_once():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ConnectionError, match="HTTP/1.x"):
            Connection(f"127.0.0.1:{httpd.server_address[1]}", connect_timeout=60)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_our_client_answers_a_malformed_server_frame_with_goaway():
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            got = b""
            while len(got) < len(PREFACE):
                got += conn.recv(65536)
            conn.sendall(frame(SETTINGS, 0, 0) + frame(PING, 0, 0, bytes(7)))   # a short PING
            rest = b""
            while chunk := conn.recv(65536):
                rest += chunk
            seen.append(rest)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(ConnectionError, match="error code 6"):
            with Connection(f"127.0.0.1:{listener.getsockname()[1]}") as conn:
                conn.send(pb.CreateWorldRequest())
        thread.join(10)
        frames, rest = [], seen[0]
        while len(rest) >= 9:
            length = int.from_bytes(rest[:3], "big")
            frames.append((rest[3], rest[9:9 + length]))
            rest = rest[9 + length:]
        goaways = [payload for kind, payload in frames if kind == GOAWAY]
        assert goaways and struct.unpack_from(">L", goaways[0], 4)[0] == FRAME_SIZE_ERROR
        assert b"a PING frame of 7 bytes" in goaways[0]
    finally:
        listener.close()


# -- 7. TLS and tokens --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


def test_tls_on_our_own_transport(certificate):
    cert, key = certificate
    with Server(Catch, tls=(cert, key)) as server:
        env = DmRpcEnv(server.address, tls=cert)
        try:
            env.reset(seed=0)
            env.step(np.int8(1))
        finally:
            env.close()
        with pytest.raises(ConnectionError, match="TLS handshake failed"):
            Connection(server.address, tls=True)          # the system CAs do not know this certificate
        with pytest.raises(ConnectionError):
            Connection(server.address)                    # plain HTTP/2 to a TLS port


def test_tls_with_grpcio_credentials(certificate):
    cert, key = certificate
    with open(cert, "rb") as f:
        credentials = grpc.ssl_channel_credentials(f.read())
    with Server(Catch, tls=(cert, key), token="s3cret") as server:
        with Connection(server.address, credentials=credentials, token="s3cret") as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name


def test_a_token_is_required_when_the_server_has_one(catch):
    with Server(Catch, token="s3cret") as server:
        for wrong, said in ((None, "no token was sent"), ("guess", "the token sent is not this server's")):
            with Connection(server.address, token=wrong) as conn:
                with pytest.raises(DmRpcError, match="UNAUTHENTICATED") as err:
                    conn.send(pb.CreateWorldRequest())
                assert err.value.code == UNAUTHENTICATED
                assert said in str(err.value) and "DMRPC_GYM_TOKEN" in str(err.value)
        env = DmRpcEnv(server.address, token="s3cret")
        env.reset(seed=0)
        env.close()
        official = servers.OfficialClient(server.address)   # grpcio: UNAUTHENTICATED too
        try:
            with pytest.raises(Exception, match="token"):
                official.send(dpb.CreateWorldRequest())
        finally:
            official.close()


def test_the_cli_serves_tls_with_a_token_from_the_environment(certificate, monkeypatch):
    cert, key = certificate
    monkeypatch.setenv("DMRPC_GYM_TOKEN", "from-env")
    server = servers.serve_like_cli("dmrpc_gym.worlds.catch:Catch", "--tls-cert", cert, "--tls-key", key)
    try:
        with Connection(server.address, tls=cert, token="from-env") as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name
        with Connection(server.address, tls=cert) as conn:       # clients read the variable too
            assert conn.send(pb.CreateWorldRequest()).world_name
        with Connection(server.address, tls=cert, token="") as conn:      # "": no token
            with pytest.raises(DmRpcError, match="UNAUTHENTICATED"):
                conn.send(pb.CreateWorldRequest())
    finally:
        server.stop()


def test_the_token_reaches_every_connection_of_vector_and_parallel_envs():
    import dmrpc_gym
    from dmrpc_gym.worlds.tag import Tag

    with Server(Catch, token="s3cret") as server:
        envs = dmrpc_gym.DmRpcVectorEnv(2, server.address, token="s3cret", compression="gzip")
        try:
            obs, _ = envs.reset(seed=0)
            assert obs.shape == (2, 10, 10)
        finally:
            envs.close()
        with pytest.raises(DmRpcError, match="UNAUTHENTICATED"):
            dmrpc_gym.DmRpcVectorEnv(2, server.address)
    with Server(Tag, token="s3cret") as server:
        env = dmrpc_gym.parallel_env(server.address, world_settings={"pursuers": 1, "evaders": 1},
                                     agents=["pursuer_0", "evader_0"], token="s3cret")
        try:
            observations, _ = env.reset(seed=0)
            assert set(observations) == {"pursuer_0", "evader_0"}
        finally:
            env.close()
