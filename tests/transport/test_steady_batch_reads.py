"""A vector step's steady exchange on one HTTP/2 connection (``SteadyTrips.send_frames`` / ``take_answers``)
against a raw peer on a socket pair: whatever way the answers come (together, cut anywhere, in another order,
with control frames or unexpected frames between them, another layout, the peer gone), each answer is read
once, whole and in order, by the batch read or by the general read after it, and the state moves as the
general path moves it."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from dmrpc_gym.transport.client.connection import GrpcConnection
from dmrpc_gym.transport.client.steady import NOT_SENT, RECEIVING, TAKEN, ByteLayout, SteadyLink
from dmrpc_gym.transport.frames import DATA, PING, SETTINGS, WINDOW_UPDATE, frame, grpc_frame

#: Two answers of a learned layout: the same bytes but for a slot (offsets 4..8 of the message).
LEARNED = [b"\x12\x0aobs:....-tail-one", b"\x12\x0aobs:....-tail-two"]
SLOT = [(4, 8)]


def answer(k: int, values: bytes) -> bytes:
    """Answer ``k`` (of :data:`LEARNED`) with ``values`` in its slot."""
    message = LEARNED[k]
    return message[:4] + values + message[8:]


class Peer:
    """A client :class:`GrpcConnection` (a blocking socket: the steady read's case) with two streams, and the raw
    server end of its socket pair."""

    def __init__(self):
        self.server, client = socket.socketpair()
        self.server.settimeout(10.0)
        self.conn = GrpcConnection(client, "/m", "localhost")
        self.server.sendall(frame(SETTINGS, 0, 0))
        self.conn.handshake()
        self.streams = [self.conn.open_stream(), self.conn.open_stream()]
        self.links = [SteadyLink(stream) for stream in self.streams]
        self.layouts = [[ByteLayout(LEARNED[k], stream.id, SLOT)] for k, stream in enumerate(self.streams)]
        self.drain()

    def drain(self) -> bytes:
        """What the client sent since the last look."""
        self.server.settimeout(0.2)
        got = b""
        try:
            while chunk := self.server.recv(1 << 16):
                got += chunk
        except (socket.timeout, BlockingIOError):
            pass
        self.server.settimeout(10.0)
        return got

    def requests(self) -> list[bytes]:
        """A request's DATA frame on each stream."""
        return [grpc_frame(b"step-%d" % k, stream.id) for k, stream in enumerate(self.streams)]

    def close(self) -> None:
        self.server.close()
        for stream in self.streams:
            stream.close()


pytestmark = pytest.mark.usefixtures("not_in_a_kernel")     # (tests/conftest.py)


@pytest.fixture
def peer():
    peer = Peer()
    yield peer
    peer.close()


def sent_and_read(peer: Peer, writes: list[bytes], pause: float = 0.0) -> tuple[int, list[bytes]]:
    """Send both requests in one ``send``, answer with ``writes`` (each a ``send``, ``pause`` s apart, from a
    thread), take what the batch read takes, and read the rest the general way: (taken, messages in order)."""
    frames = peer.requests()
    assert peer.conn.send_frames(peer.links, [(f, len(f) - 9) for f in frames]) is True
    assert peer.drain() == b"".join(frames)           # one send: both DATA frames, as prebuilt
    assert [link.phase for link in peer.links] == [RECEIVING, RECEIVING]

    def write():
        for data in writes:
            peer.server.sendall(data)
            time.sleep(pause)
    writer = threading.Thread(target=write)
    writer.start()
    taken = peer.conn.take_answers(peer.links, peer.layouts, None)
    messages = []
    for link in peer.links:
        messages.append(bytes(link.answer()) if link.phase == TAKEN else bytes(peer.conn.read(link.stream, None)))
    writer.join()
    return taken, messages


def test_both_answers_in_one_write_are_taken(peer):
    answers = [answer(0, b"AAAA"), answer(1, b"BBBB")]
    frames_before = peer.conn.state.frames
    taken, messages = sent_and_read(peer, [grpc_frame(answers[0], 1) + grpc_frame(answers[1], 3)])
    assert (taken, messages) == (2, answers)
    assert [link.matched for link in peer.links] == [0, 0]
    assert peer.conn.state.frames == frames_before + 2
    assert [s.messages_read for s in peer.streams] == [1, 1] and [s.messages_sent for s in peer.streams] == [1, 1]


@pytest.mark.parametrize("cut", range(1, 2 * (len(LEARNED[0]) + 14), 3))
def test_answers_cut_anywhere_are_taken_whole(peer, cut):
    answers = [answer(0, b"CCCC"), answer(1, b"DDDD")]
    wire = grpc_frame(answers[0], 1) + grpc_frame(answers[1], 3)
    taken, messages = sent_and_read(peer, [wire[:cut], wire[cut:]], pause=0.01)
    assert (taken, messages) == (2, answers)


def test_answers_in_the_other_order_are_taken(peer):
    answers = [answer(0, b"EEEE"), answer(1, b"FFFF")]
    taken, messages = sent_and_read(peer, [grpc_frame(answers[1], 3) + grpc_frame(answers[0], 1)])
    assert (taken, messages) == (2, answers)


def test_a_control_frame_between_hands_the_rest_to_the_general_read(peer):
    answers = [answer(0, b"GGGG"), answer(1, b"HHHH")]
    wire = grpc_frame(answers[0], 1) + frame(PING, 0, 0, b"pingpong") + grpc_frame(answers[1], 3)
    taken, messages = sent_and_read(peer, [wire])
    assert (taken, messages) == (1, answers)
    assert frame(PING, 1, 0, b"pingpong") in peer.drain()          # the general read answered the PING
    assert peer.conn.state.buf == b""


def test_a_window_update_first_hands_everything_over(peer):
    answers = [answer(0, b"IIII"), answer(1, b"JJJJ")]
    wire = frame(WINDOW_UPDATE, 0, 0, (1000).to_bytes(4, "big")) + grpc_frame(answers[0], 1) + grpc_frame(answers[1], 3)
    taken, messages = sent_and_read(peer, [wire])
    assert (taken, messages) == (0, answers)


def test_another_layout_is_left_to_the_general_read(peer):
    other = b"\x12\x0bobs:.....-tail-one"       # a longer message: not the learned layout
    answers = [answer(0, b"KKKK"), other]
    taken, messages = sent_and_read(peer, [grpc_frame(answers[0], 1) + grpc_frame(other, 3)])
    assert (taken, messages) == (1, answers)
    changed = answer(1, b"LLLL")[:-1] + b"X"     # same size, a fixed byte changed
    taken, messages = sent_and_read(peer, [grpc_frame(changed, 3) + grpc_frame(answer(0, b"MMMM"), 1)])
    assert (taken, messages) == (0, [answer(0, b"MMMM"), changed])


def test_a_later_layout_of_the_list_is_matched(peer):
    ended = LEARNED[1][:-3] + b"end"
    peer.layouts[1] = [peer.layouts[1][0], ByteLayout(ended, 3, SLOT)]
    answers = [answer(0, b"NNNN"), ended[:4] + b"OOOO" + ended[8:]]
    taken, messages = sent_and_read(peer, [grpc_frame(answers[0], 1) + grpc_frame(answers[1], 3)])
    assert (taken, messages) == (2, answers)
    assert [link.matched for link in peer.links] == [0, 1]


def test_the_peer_gone_after_one_answer(peer):
    frames = peer.requests()
    assert peer.conn.send_frames(peer.links, [(f, len(f) - 9) for f in frames]) is True
    peer.server.sendall(grpc_frame(answer(0, b"PPPP"), 1))
    peer.server.shutdown(socket.SHUT_WR)
    assert peer.conn.take_answers(peer.links, peer.layouts, None) == 1
    assert bytes(peer.links[0].answer()) == answer(0, b"PPPP")
    with pytest.raises(ConnectionError):
        peer.conn.read(peer.streams[1], None)


def test_nothing_is_sent_where_the_windows_do_not_all_fit(peer):
    frames = peer.requests()
    peer.streams[1].send.size = len(frames[1]) - 10          # the second's window is one byte short
    window = peer.conn.state.send.size
    assert peer.conn.send_frames(peer.links, [(f, len(f) - 9) for f in frames]) is NOT_SENT
    assert peer.conn.state.send.size == window and peer.streams[0].send.size > 0
    assert [s.messages_sent for s in peer.streams] == [0, 0]
    assert peer.drain() == b""


def test_nothing_is_read_with_a_deadline(peer):
    frames = peer.requests()
    assert peer.conn.send_frames(peer.links, [(f, len(f) - 9) for f in frames]) is True
    peer.server.sendall(grpc_frame(answer(0, b"QQQQ"), 1) + grpc_frame(answer(1, b"RRRR"), 3))
    assert peer.conn.take_answers(peer.links, peer.layouts, 5.0) == 0
    assert [bytes(peer.conn.read(s, 5.0)) for s in peer.streams] == [answer(0, b"QQQQ"), answer(1, b"RRRR")]
