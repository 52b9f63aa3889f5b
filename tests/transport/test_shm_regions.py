"""Shared-memory regions (dmrpc_gym.transport.shm_regions): passed between real processes over real Unix
sockets; everything a peer sends is checked; a dead peer leaves nothing; another user is refused."""
from __future__ import annotations

import fcntl
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from processes import as_nobody, memfds

from dmrpc_gym.transport.shm_regions import (ALIGN, HEADER, Allocator, Region, RegionError, check_peer, connect,
                                             listen, peer_credentials, receive_region, send_region)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def open_fds() -> set[tuple[str, str]]:
    """This process's descriptors of the kinds a peer's announcement can bring (memfds, sockets,
    files), and what each holds; left out: the listing's own descriptor, and the eventfds and epolls
    that other threads of a test run (event loops, gRPC) open and close as they please."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:           # the listing's descriptor, closed by now
            continue
        if not target.startswith(("anon_inode:[eventfd]", "anon_inode:[eventpoll]", "anon_inode:[timerfd]")):
            found.add((fd, target))
    return found


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.settimeout(10)
    b.settimeout(10)
    yield a, b
    a.close()
    b.close()


# -- regions and spans ---------------------------------------------------------------------------------
def test_a_region_passed_over_a_socket_holds_the_same_bytes_and_arrays_handed_out_are_owned(pair):
    a, b = pair
    values = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    floats = np.random.default_rng(1).standard_normal(1000).astype(np.float64)
    with Region.create(1 << 20) as mine:
        spans = Allocator(mine.size)
        at_u8, at_f64 = spans.allocate(values.nbytes), spans.allocate(floats.nbytes)
        assert at_u8 % ALIGN == 0 and at_f64 % ALIGN == 0 and at_f64 >= at_u8 + values.nbytes
        mine.write(at_u8, values)
        mine.write(at_f64, floats)
        send_region(a, mine)
        with receive_region(b) as theirs:
            owned = theirs.array(at_u8, np.uint8, values.shape)
            view = theirs.array(at_f64, np.float64, floats.shape, copy=False)
            assert owned.tobytes() == values.tobytes() and view.tobytes() == floats.tobytes()
            assert owned.flags.owndata and owned.flags.writeable
            assert not view.flags.owndata
            mine.write(at_u8, np.zeros_like(values))          # the sender's next step overwrites the span
            mine.write(at_f64, np.full_like(floats, 7.0))
            assert owned.tobytes() == values.tobytes()        # the user's array is theirs
            assert (view == 7.0).all()                         # a view sees the region, as copy=False says
            theirs.write(0, np.array([1, 2, 3], np.uint8))     # and writes go the other way too
            assert bytes(mine.view(0, 3)) == b"\x01\x02\x03"


def test_spans_read_from_a_peer_are_checked_before_use():
    with Region.create(4096) as region:
        bad = [
            ((-1, np.uint8, (4,)), "offset must be 0 or more, got -1"),
            ((4090, np.uint8, (8,)), "a span of 8 bytes at offset 4090 runs past the region's 4096 bytes"),
            ((1.5, np.uint8, (1,)), "offset must be an int, got float"),
            ((True, np.uint8, (1,)), "offset must be an int, got bool"),
            ((2, np.float64, (1,)), "must start at a multiple of 8, got offset 2"),
            ((0, object, (1,)), "holds numbers or bools, not object"),
            ((0, np.uint8, (-1, 4)), "dimensions must be 0 or more, got [-1, 4]"),
            ((0, np.uint8, (1 << 40, 1 << 40, 1 << 40)), "is larger than the region (4096 bytes)"),
            ((0, np.uint8, "ab"), "a shape is a sequence of ints"),
            ((0, "not a dtype", (1,)), "not a dtype"),
            ((np.int64(2**62), np.uint8, (1 << 10,)), "runs past the region's 4096 bytes"),
        ]
        for (offset, dtype, shape), said in bad:
            with pytest.raises(RegionError) as caught:
                region.array(offset, dtype, shape)
            assert said in str(caught.value), (offset, dtype, shape)
        with pytest.raises(RegionError, match="a span's length must be 0 or more, got -3"):
            region.view(0, -3)
        with pytest.raises(RegionError, match="numbers or bools, not object"):
            region.write(0, np.array([None]))
        assert region.array(4096, np.uint8, (0,)).shape == (0,)        # an empty array at the very end is fine
        assert region.array(0, np.uint8, (0, 1 << 40)).shape == (0, 1 << 40)
    with pytest.raises(RegionError, match="the region is closed"):
        region.view(0, 1)


def test_a_region_cannot_be_made_too_large_or_empty():
    for size in (0, -1, 2**31, 1.0):
        with pytest.raises(RegionError, match="a region's size must be an int in 1.."):
            Region.create(size)


def test_the_allocator_is_bounded_aligned_and_merges_what_is_freed():
    spans = Allocator(1024, max_spans=3)
    a, b, c = spans.allocate(1), spans.allocate(65), spans.allocate(64)
    assert (a, b, c) == (0, 64, 192) and spans.used == 256
    with pytest.raises(RegionError, match="already holds 3 spans, the most allowed"):
        spans.allocate(1)
    spans.free(b)
    with pytest.raises(RegionError, match="no span was allocated at offset 64"):
        spans.free(b)
    spans.free(a)
    assert spans.allocate(192) == 0            # the two freed spans merged into one
    spans.free(0)
    spans.free(c)
    assert spans.allocate(1024) == 0           # everything merged back
    with pytest.raises(RegionError, match=r"no room for 1 bytes in the region \(1024 bytes, 1024 in use, "
                                          r"the largest free span 0\)"):
        spans.allocate(1)
    for n in (0, -5, 2.0):
        with pytest.raises(RegionError, match="positive int length"):
            spans.allocate(n)


# -- announcements from a peer -------------------------------------------------------------------------
def test_garbage_announcements_get_a_clear_error_and_leak_no_descriptor(pair):
    a, b = pair
    read_end, write_end = os.pipe()
    unsealed = os.memfd_create("unsealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(unsealed, 4096)
    sealed = Region.create(4096)
    try:
        header = HEADER.pack(b"DRGN", 1, 4096)
        cases = [
            (lambda: socket.send_fds(a, [b"XXXX" + header[4:]], [sealed.fd]), "starts with b'DRGN' version 1, got b'XXXX'"),
            (lambda: socket.send_fds(a, [HEADER.pack(b"DRGN", 9, 4096)], [sealed.fd]), "got b'DRGN' version 9"),
            (lambda: a.sendall(header), "came without its descriptor"),
            (lambda: socket.send_fds(a, [header], [sealed.fd, sealed.fd]), "with 2 descriptors, expected one"),
            (lambda: socket.send_fds(a, [header], [read_end]), "is not a memfd"),
            (lambda: socket.send_fds(a, [header], [unsealed]), "not sealed with F_SEAL_SHRINK and F_SEAL_GROW"),
            (lambda: socket.send_fds(a, [HEADER.pack(b"DRGN", 1, 8192)], [sealed.fd]), "has 4096 bytes, announced as 8192"),
            (lambda: socket.send_fds(a, [HEADER.pack(b"DRGN", 1, 1 << 40)], [sealed.fd]), "at most 1073741824 are accepted"),
            (lambda: socket.send_fds(a, [HEADER.pack(b"DRGN", 1, 0)], [sealed.fd]), "a region of 0 bytes"),
        ]
        before = open_fds()
        for send, said in cases:
            send()
            with pytest.raises(RegionError) as caught:
                receive_region(b)
            assert said in str(caught.value)
            assert open_fds() == before, said      # what came with the garbage was closed
        socket.send_fds(a, [b"DRG"], [sealed.fd])   # a short announcement
        with pytest.raises(RegionError, match="a region announcement is 13 bytes, got 3"):
            receive_region(b)
        assert open_fds() == before
        socket.send_fds(a, [header], [sealed.fd])
        with pytest.raises(RegionError, match="at most 1024 are accepted"):
            receive_region(b, max_size=1024)
        closed = (str(a.fileno()), os.readlink(f"/proc/self/fd/{a.fileno()}"))
        a.close()
        with pytest.raises(EOFError, match="closed the connection before announcing a region"):
            receive_region(b)
        assert open_fds() == before - {closed}
    finally:
        for fd in (read_end, write_end, unsealed):
            os.close(fd)
        sealed.close()


def test_a_region_cannot_be_truncated_under_the_peer():
    with Region.create(8192) as region:
        for size in (0, 4096, 16384):
            with pytest.raises(PermissionError):
                os.ftruncate(region.fd, size)
        with pytest.raises(PermissionError):         # nor unsealed
            fcntl.fcntl(region.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
        assert region.array(8184, np.uint8, (8,)).tolist() == [0] * 8


# -- processes: who may connect, and a peer that dies -----------------------------------------------------
_SENDER = textwrap.dedent("""
    import sys, numpy as np
    from dmrpc_gym.transport.shm_regions import Region, connect, send_region
    sock = connect(sys.argv[1])
    region = Region.create(1 << 20)
    region.write(0, np.arange(1 << 18, dtype=np.uint32))
    send_region(sock, region)
    sys.stdout.write("SENT\\n"); sys.stdout.flush()
    sock.recv(1)            # waits here until killed
""")


def test_a_peer_killed_after_sending_leaves_nothing_behind_and_its_region_stays_readable():
    listener, name = listen()
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    child = subprocess.Popen([sys.executable, "-c", _SENDER, name], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": path})
    try:
        listener.settimeout(30)
        conn, _ = listener.accept()
        conn.settimeout(30)
        assert check_peer(conn).pid == child.pid == peer_credentials(conn).pid
        region = receive_region(conn)
        assert child.stdout.readline().strip() == "SENT"
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
        assert not os.path.exists(f"/proc/{child.pid}/fd")        # the peer is gone, and with it its descriptors
        values = region.array(0, np.uint32, (1 << 18,))
        assert (values == np.arange(1 << 18, dtype=np.uint32)).all()   # no SIGBUS: the memory is still there
        assert memfds()                                               # ours, until we close it
        region.close()
        del values
        assert memfds() == []                                         # nothing left: no descriptor, no mapping
        conn.close()
    finally:
        listener.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    if os.path.isdir("/dev/shm"):
        assert set(os.listdir("/dev/shm")) <= shm_before            # no named shared memory was ever made
    with pytest.raises(OSError):
        connect(name, timeout=2).close()                              # the abstract name went with the listener


def test_a_listener_has_an_unguessable_abstract_name_and_no_file():
    first, a = listen()
    second, b = listen()
    try:
        assert a != b and a.startswith("dmrpc_gym-") and len(a) == len("dmrpc_gym-") + 32
        assert first.getsockname() == ("\0" + a).encode()
        assert not os.path.exists(a)
    finally:
        first.close()
        second.close()


_NOBODY = textwrap.dedent("""
    import socket, sys
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("\\0" + sys.argv[1])
    sock.sendall(b"x")
    sock.recv(1)
""")


def test_a_process_of_another_user_is_refused():
    nobody = as_nobody()
    python = nobody.pop("python")
    listener, name = listen()
    listener.settimeout(30)
    child = subprocess.Popen([python, "-c", _NOBODY, name], **nobody, stderr=subprocess.PIPE)
    try:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            child.kill()
            pytest.skip(f"the child as 'nobody' did not connect: {child.communicate()[1].decode()[-300:]}")
        with conn:
            assert peer_credentials(conn).uid == nobody['user']
            with pytest.raises(PermissionError, match=f"runs as uid {nobody['user']}; only uid 0 may share memory"):
                check_peer(conn)
            assert check_peer(conn, uid=nobody['user']).pid == child.pid     # who is allowed is the caller's to say
    finally:
        listener.close()
        child.kill()
        child.wait()
