"""What a client's HTTP/2 connection does with the events of the server's control frames, which its
state (:class:`~dmrpc_gym.transport.client.state.ClientState`) takes: SETTINGS (awaited at the
handshake), a stream's bad WINDOW_UPDATE, RST_STREAM,
GOAWAY, PING ACKs; the ACKs the state owes, sent without waiting; and the GOAWAY it sends on a protocol error.

A mixin of :class:`~dmrpc_gym.transport.client.connection.GrpcConnection`; every method
runs with the connection's ``lock`` held, from its frame reader.
"""
from __future__ import annotations

from dmrpc_gym.transport.client import interrupts
from dmrpc_gym.transport.codes import GrpcStatus
from dmrpc_gym.transport.connection_state import GoAway, PeerReset, PingAcked, ResetOwed, SettingsChanged
from dmrpc_gym.transport.frames import ENHANCE_YOUR_CALM, MAX_OWED_CONTROL, ProtocolError, goaway_frame

__all__: list[str] = []          # a part of GrpcConnection, not an interface of its own


class ControlFrames:
    """The control frames of :class:`~dmrpc_gym.transport.client.connection.GrpcConnection` (a mixin).

    What it needs of its host: :class:`~dmrpc_gym.transport.client.contracts.ControlHost`.
    """

    def _fail(self, err: ProtocolError) -> None:
        """A connection error: tell the server with GOAWAY, then raise a ``ConnectionError``.

        The GOAWAY goes after what a cut-short send left in ``_unsent`` (the rest of a frame, or
        gathered frames), never inside it; one try, as the connection ends either way."""
        goaway = goaway_frame(0, err.code, str(err).encode()[:200])
        pending, self._unsent = self._unsent + goaway, b""
        try:                          # without waiting: a peer that reads nothing holds no call here
            self._at_once(lambda flags: self._sock.send(pending, flags))
        except OSError:
            pass
        self._dead = ConnectionError(f"HTTP/2 protocol error from the server (error code {err.code}): {err}")
        raise self._dead

    def _on_goaway(self, event: GoAway) -> None:
        debug = event.debug
        self._goaway = f"HTTP/2 error code {event.code}{': ' + debug if debug else ''}"
        if debug == "too_many_pings" and self._ping_every:
            self._goaway += f"; keepalive={self._ping_every:g} s pings more often than this server allows"
        for stream in list(self.streams.values()):
            if stream.id > event.last_stream:     # never to be answered
                stream.end(None, f"the server is going away ({self._goaway})")

    def _on_reset_owed(self, event: ResetOwed) -> None:
        """A bad WINDOW_UPDATE on one stream: that stream only is reset (RFC 9113 6.9.1)."""
        event.stream.reset(event.code, None, f"the server broke HTTP/2 flow control on this stream: {event.why}")

    def _on_settings(self, event: SettingsChanged) -> None:
        """The server's SETTINGS were applied by the state (and their ACK is owed)."""
        peer = self.state.peer                # (the state sized its header encoder by them)
        if peer.max_streams == 0:          # our streams are over the peer's limit
            for stream in list(self.streams.values()):
                stream.end(GrpcStatus.UNAVAILABLE, "the server allows no streams now (SETTINGS_MAX_CONCURRENT_STREAMS 0)")
        self._settled = True

    def _on_ping_ack(self, event: PingAcked) -> None:
        self._pong()

    def _owe(self, control: bytes) -> None:
        """Send a control frame the server is owed (a PING's ACK) without waiting on the socket:
        what it does not take now waits in ``_unsent`` for the next send. Past
        :data:`~dmrpc_gym.transport.frames.MAX_OWED_CONTROL` bytes waiting, the server sends faster
        than it reads, and the connection ends (``ConnectionError``, GOAWAY ENHANCE_YOUR_CALM):
        the call's timeout holds, and what is owed stays bounded."""
        self._unsent += control
        guard = self._kernel and interrupts.guarded()
        try:
            if guard:                 # (a Ctrl-C must not send bytes twice: see interrupts)
                interrupts.hold()
            n = self._at_once(lambda flags: self._sock.send(self._unsent, flags))
            self._unsent = self._unsent[n or 0:]
        finally:
            if guard:
                interrupts.release()
        if len(self._unsent) > MAX_OWED_CONTROL:
            self._fail(ProtocolError(ENHANCE_YOUR_CALM, f"the server sent PINGs without reading their ACKs: "
                                                        f"{len(self._unsent)} bytes owed to it, past the "
                                                        f"{MAX_OWED_CONTROL} a connection holds"))

    def _on_reset(self, event: PeerReset) -> None:
        event.stream.end(None, f"the server reset the stream (HTTP/2 error code {event.code})")

    def handshake(self) -> None:
        """Block until the server's first SETTINGS frame arrives (within the socket's timeout, as a whole).

        An HTTP/1.x server (its answer starts ``HTTP/``) is a ``ConnectionError`` at once.
        """
        self._begin()
        while not self._settled:
            self._read_frame(one=True)      # the SETTINGS (checked: the state's start); what follows them waits
        self._end_call()
