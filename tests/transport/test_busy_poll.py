"""Busy polling (``transport/busy_poll.py``): the window's setting, a poll in vain turning polling off and a
prompt answer turning it on again, on both the client's reads and the server's selector; off, nothing polls."""
from __future__ import annotations

import socket
import sys
import threading
import time

import numpy as np
import pytest

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.server import Server
from dmrpc_gym.transport import busy_poll
from dmrpc_gym.transport.busy_poll import BusySelector, Poller, reader, selector, window
from dmrpc_gym.worlds.catch import Catch

linux = pytest.mark.skipif(sys.platform != "linux", reason="MSG_DONTWAIT reads")


def test_the_window_is_read_from_the_environment_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.delenv(busy_poll.BUSY_POLL_ENV, raising=False)
    assert window() == busy_poll.WINDOW
    monkeypatch.setenv(busy_poll.BUSY_POLL_ENV, "75")
    assert window() == 75e-6
    for bad in ("fast", "-1", "nan"):
        monkeypatch.setenv(busy_poll.BUSY_POLL_ENV, bad)
        with pytest.raises(ValueError, match="DMRPC_BUSY_POLL_US"):
            window()


def test_off_nothing_polls(monkeypatch):
    monkeypatch.setenv(busy_poll.BUSY_POLL_ENV, "0")
    a, b = socket.socketpair()
    try:
        assert reader(a) == a.recv_into                  # the socket's own read
        assert type(selector()) is not BusySelector
    finally:
        a.close()
        b.close()


@linux
def test_a_poll_in_vain_turns_polling_off_and_a_prompt_answer_on_again():
    a, b = socket.socketpair()
    try:
        poller, buf = Poller(a, 0.001), bytearray(8)
        later = threading.Timer(0.05, b.send, (b"late",))     # slower than the window
        later.start()
        assert poller.recv_into(buf) == 4 and not poller.polling
        later.join()
        b.send(b"now")                                        # there before the read: within the window
        assert poller.recv_into(buf) == 3 and poller.polling
        b.send(b"again")
        assert poller.recv_into(buf) == 5 and poller.polling
    finally:
        a.close()
        b.close()


@linux
def test_the_selector_returns_events_at_once_and_waits_its_timeout_otherwise():
    import selectors
    a, b = socket.socketpair()
    chooser = BusySelector(0.001)
    try:
        chooser.register(a, selectors.EVENT_READ)
        b.send(b"x")
        assert [key.fileobj for key, _ in chooser.select(5.0)] == [a]
        a.recv(1)
        start = time.perf_counter()
        assert chooser.select(0.02) == [] and time.perf_counter() - start >= 0.02 - 1e-3
        assert not chooser.polling                            # in vain: off until a prompt event
        b.send(b"y")
        assert chooser.select(5.0) and chooser.polling
    finally:
        chooser.close()
        a.close()
        b.close()


@linux
def test_steps_are_the_same_with_polling_on_and_off(monkeypatch):
    def run(microseconds: str) -> list:
        monkeypatch.setenv(busy_poll.BUSY_POLL_ENV, microseconds)   # (read as the server and the client start)
        with Server(Catch) as server, DmRpcEnv(server.address) as env:
            return [env.reset(seed=3)] + [env.step(np.int8(i % 3 - 1)) for i in range(40)]
    assert str(run("200")) == str(run("0"))
