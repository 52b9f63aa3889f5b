"""``dmrpc-gym dashboard ADDRESS`` (issue 43): the page in headless Chromium against real servers (it loads
without console errors, lists the worlds, shows a CartPole frame that changes while a client steps, needs the
token of a token-protected server, comes back within 10 s of a server's restart), and its safety checks in
plain Python (the Host and Origin headers, no CORS, the token never in what the page gets, --allow-remote).
Screenshots are kept under each test's tmp_path."""
from __future__ import annotations

import http.client
import json
import os
import struct
import threading
import time
import urllib.request

import gymnasium as gym
import pytest

import dmrpc_gym  # noqa: F401 - registers dmrpc/Remote-v0
import servers
from browser import Browser, chromium
from dmrpc_gym.app.cli import main
from dmrpc_gym.app.dashboard import DashboardServer
from dmrpc_gym.app.status import StatusReader
from dmrpc_gym.server.serving.watching import WATCH_PROPERTY
from dmrpc_gym.worlds.catch import Catch

if chromium() is None and os.environ.get("DMRPC_REQUIRE_CHROMIUM") == "1":     # .ci/run installs it
    raise RuntimeError("DMRPC_REQUIRE_CHROMIUM=1 and chromium is not installed (apt-get install -y chromium)")
needs_chromium = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")


class Stepping:
    """A client stepping a world of ``address`` with random actions on a thread until the block ends."""

    def __init__(self, address: str, **kwargs):
        self.env = gym.make("dmrpc/Remote-v0", address=address, **kwargs)
        self.env.reset(seed=0)
        self.stop, self.steps = threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            _, _, terminated, truncated, _ = self.env.step(self.env.action_space.sample())
            self.steps += 1
            if terminated or truncated:
                self.env.reset()
            time.sleep(0.005)

    def __enter__(self) -> "Stepping":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)
        self.env.close()


def request(url: str, path: str, method: str = "GET", body: dict | None = None,
            headers: dict | None = None) -> tuple[int, dict, bytes]:
    """One HTTP request to the dashboard at ``url``: ``(status, headers, body)``."""
    host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


def png_size(frame) -> tuple[int, int]:
    """``(height, width)`` of a PNG (the watch's frames come so), from its header."""
    data = bytes(frame)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return height, width


def watched_frames(reader: StatusReader, step, rounds: int, steps: int) -> tuple[list, dict]:
    """Watch world-1 at 30 frames/s; ``rounds`` times, ``step()`` ``steps`` times and read its frame.
    The frames, and the world's watched numbers after them."""
    reader.write_value(WATCH_PROPERTY, json.dumps({"world": "world-1", "fps": 30}))
    frames = []
    for _ in range(rounds):
        for _ in range(steps):
            step()
        frames.append(reader.read_value("dmrpc_gym.watch_frame"))
        time.sleep(0.05)              # past the rate's frame time: the next read renders anew
    return frames, reader.read_json(WATCH_PROPERTY)["worlds"][0]


def state(dash: DashboardServer) -> dict:
    return json.loads(urllib.request.urlopen(dash.url + "api/state", timeout=10).read())


def wait_until(predicate, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "not true in time"
        time.sleep(0.1)


# -- plain Python: the safety checks ---------------------------------------------------------

def test_host_header_origin_and_no_cors():
    with servers.start(Catch) as server, DashboardServer(server.address) as dash:
        port = int(dash.url.rstrip("/").rsplit(":", 1)[1])
        for path in ("/", "/api/state"):
            code, headers, _ = request(dash.url, path)
            assert code == 200, path
            assert not [h for h in headers if h.lower().startswith("access-control")], headers
            assert "default-src 'none'" in headers["Content-Security-Policy"]
        code, _, _ = request(dash.url, "/", headers={"Host": f"localhost:{port}"})
        assert code == 200
        # DNS rebinding: a name that is not this dashboard's address, or another port
        for host in (f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1"):
            code, headers, body = request(dash.url, "/api/state", headers={"Host": host})
            assert code == 403 and b"DNS rebinding" in body, host
            assert not [h for h in headers if h.lower().startswith("access-control")]
        # another site's page posting to it
        code, _, _ = request(dash.url, "/api/watch", "POST", {"world": "world-1", "fps": 1},
                             headers={"Origin": "http://evil.example"})
        assert code == 403 and state(dash)["watch"]["world"] == ""
        code, headers, _ = request(dash.url, "/api/watch", "OPTIONS",
                                   headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert code >= 400 and not [h for h in headers if h.lower().startswith("access-control")]
        code, _, body = request(dash.url, "/api/watch", "POST", {"world": "world-1", "fps": 99})
        assert code == 400 and b"fps must be in" in body


def test_the_token_stays_out_of_the_page(monkeypatch):
    token = "tok-9f3a-never-in-the-page"
    with servers.start(Catch, token=token) as server, Stepping(server.address, token=token):
        with DashboardServer(server.address, token=token) as dash:
            request(dash.url, "/api/watch", "POST", {"world": "world-1", "fps": 2})
            wait_until(lambda: state(dash)["connected"] and state(dash)["worlds"])
            bodies = [request(dash.url, path)[2] for path in ("/", "/api/state", "/api/frame.png", "/nothing")]
            assert all(token.encode() not in body for body in bodies)
        with DashboardServer(server.address) as dash:     # without the token: refused, and said so
            refused = wait_until(lambda: state(dash)["error"] if state(dash)["error"] != "not read yet" else None)
            assert "UNAUTHENTICATED" in refused and token not in refused
        monkeypatch.setenv("DMRPC_GYM_TOKEN", token)      # the token from the environment, as for any client
        with DashboardServer(server.address) as dash:
            wait_until(lambda: state(dash)["connected"] and state(dash)["worlds"])


def test_it_reaches_a_server_over_tls(tmp_path):
    from interop_peers import self_signed
    cert, key = self_signed(tmp_path)
    with servers.start(Catch, tls=(cert, key)) as server, Stepping(server.address, tls=cert), \
            DashboardServer(server.address, tls=cert) as dash:
        request(dash.url, "/api/watch", "POST", {"world": "world-1", "fps": 1})
        world = wait_until(lambda: state(dash)["connected"] and state(dash)["worlds"])[0]
        assert world["name"] == "world-1" and "episodes" in world


def test_the_command_prints_its_url_and_stops_on_ctrl_c():
    import signal
    import subprocess
    import sys
    with servers.start(Catch) as server:
        proc = subprocess.Popen([sys.executable, "-m", "dmrpc_gym", "dashboard", server.address, "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            assert line.startswith(f"dmrpc-gym dashboard of {server.address}: http://127.0.0.1:"), line
            url = line.split(": ", 1)[1].split()[0]
            assert request(url, "/")[0] == 200
            proc.send_signal(signal.SIGINT)
            assert proc.wait(30) == 130 and "interrupted" in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_a_ctrl_c_that_lands_before_the_wait_begins_still_stops_the_command(capsys):
    """A SIGINT whose handler is due but which woke no system call (as when it lands between the URL's
    print and the wait, or is taken by another thread) stops the command within a second."""
    import _thread
    import signal
    with servers.start(Catch) as server:
        done = threading.Event()

        def interrupt():
            if done.wait(1.0):                   # the command ended by itself: nothing to interrupt
                return
            _thread.interrupt_main()             # the handler is due; no system call is interrupted
            if not done.wait(10):                # an endless wait would miss it: a real SIGINT ends the test
                os.kill(os.getpid(), signal.SIGINT)

        helper = threading.Thread(target=interrupt, daemon=True)
        helper.start()
        started = time.monotonic()
        try:
            status = main(["dashboard", server.address, "--port", "0"])
        finally:
            done.set()
            helper.join(15)
        assert status == 130 and time.monotonic() - started < 5.0
        assert "dmrpc-gym dashboard: interrupted" in capsys.readouterr().err


def test_allow_remote_and_the_printed_url(capsys):
    assert main(["dashboard", "127.0.0.1:1", "--host", "0.0.0.0"]) == 1
    assert "not a loopback address" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--allow-remote"):
        DashboardServer("127.0.0.1:1", host="0.0.0.0")
    with DashboardServer("127.0.0.1:1", host="0.0.0.0", allow_remote=True, connect_timeout=0.1) as dash:
        code, _, _ = request(dash.url, "/")
        assert code == 200


def test_a_watch_ends_with_its_connection_and_returns_are_kept_only_while_watched():
    with servers.start(Catch) as server, Stepping(server.address, world_settings={"rows": 3}):
        with StatusReader(server.address) as reader:
            reader.write_value(WATCH_PROPERTY, json.dumps({"world": "world-1", "fps": 1}))
            watched = wait_until(lambda: [w for w in reader.read_json(WATCH_PROPERTY)["worlds"] if w["returns"]])
            assert watched[0]["episodes"] >= len(watched[0]["returns"]) >= 1 and watched[0]["no_frames"]
            assert "render_mode=\"rgb_array\"" in watched[0]["no_frames"]
        with StatusReader(server.address) as reader:     # a new connection: no watch until it writes one
            with pytest.raises(Exception, match="no watch on this connection"):
                reader.read_json(WATCH_PROPERTY)


# -- in Chromium -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    if chromium() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    with Browser() as b:
        yield b


def open_page(browser: Browser, url: str) -> None:
    browser.problems.clear()
    browser.navigate(url)


@needs_chromium
def test_the_page_lists_worlds_and_shows_a_changing_cartpole_frame(browser, tmp_path):
    with servers.start("CartPole-v1") as server, Stepping(server.address, render_mode="rgb_array") as client, \
            Stepping(server.address):
        with DashboardServer(server.address) as dash:
            open_page(browser, dash.url)
            browser.wait_for("document.querySelectorAll('#worlds tr').length === 2")
            assert browser.evaluate("document.getElementById('health').textContent") == "SERVING"
            rows = browser.evaluate("[...document.querySelectorAll('#worlds tr')].map(r => r.dataset.world)")
            assert sorted(rows) == ["world-1", "world-2"]
            # the world without frames says so, and how to get them
            browser.evaluate("document.querySelector('#worlds tr[data-world=\"world-2\"] button').click()")
            note = browser.wait_for("document.getElementById('frame-note').style.display === 'block' "
                                    "&& document.getElementById('frame-note').textContent")
            assert "renders no frames" in note and "render_mode=\"rgb_array\"" in note
            browser.screenshot(tmp_path / "no-frames.png")
            browser.evaluate("document.querySelector('#worlds tr[data-world=\"world-1\"] button').click()")
            browser.wait_for("(() => { const i = document.getElementById('frame'); "
                             "return i.style.display === 'block' && i.complete && i.naturalWidth === 600; })()")
            first = browser.screenshot(tmp_path / "frame-1.png", "#frame")
            at = browser.evaluate("document.getElementById('frame-at').textContent")
            steps = client.steps
            browser.wait_for(f"document.getElementById('frame-at').textContent !== {json.dumps(at)} "
                             f"&& document.getElementById('frame').complete")
            second = browser.screenshot(tmp_path / "frame-2.png", "#frame")
            assert client.steps > steps and first != second
            browser.wait_for("document.querySelectorAll('#plot-rate polyline').length === 1")
            browser.screenshot(tmp_path / "dashboard.png")
            assert not browser.problems and not dash.page_errors, (browser.problems, dash.page_errors)


@needs_chromium
def test_a_token_protected_server_needs_the_token(browser, tmp_path):
    with servers.start(Catch, token="s3cret") as server, Stepping(server.address, token="s3cret"):
        with DashboardServer(server.address) as dash:
            open_page(browser, dash.url)
            banner = browser.wait_for("document.getElementById('banner').style.display === 'block' "
                                      "&& document.getElementById('banner').textContent")
            assert "UNAUTHENTICATED" in banner and browser.evaluate("document.querySelectorAll('#worlds tr').length") == 0
            browser.screenshot(tmp_path / "no-token.png")
        with DashboardServer(server.address, token="s3cret") as dash:
            open_page(browser, dash.url)
            browser.wait_for("document.querySelectorAll('#worlds tr').length === 1")
            assert "s3cret" not in browser.evaluate("document.documentElement.outerHTML")
            assert not browser.problems, browser.problems


@needs_chromium
def test_the_page_comes_back_within_10_s_after_the_server_restarts(browser, tmp_path):
    address = f"unix:{tmp_path / 'server.sock'}"
    server = servers.start(Catch, address=address)
    try:
        with DashboardServer(address) as dash:
            open_page(browser, dash.url)
            browser.wait_for("document.getElementById('health').textContent === 'SERVING'")
            first = browser.evaluate("document.getElementById('uptime').textContent")
            server.stop()
            browser.wait_for("document.getElementById('health').textContent === 'UNREACHABLE'")
            browser.screenshot(tmp_path / "unreachable.png")
            server = servers.start(Catch, address=address)
            restarted = time.monotonic()
            browser.wait_for("document.getElementById('health').textContent === 'SERVING'", timeout=10)
            took = time.monotonic() - restarted
            assert took < 10 and first
            browser.screenshot(tmp_path / "back.png")
            assert not browser.problems and not dash.page_errors, (browser.problems, dash.page_errors)
    finally:
        server.stop()


def test_pettingzoo_and_dm_env_worlds_are_watched_too():
    from dm_worlds import probe
    from dmrpc_gym.client.parallel import DmRpcParallelEnv
    from dmrpc_gym.worlds.tag import Tag
    with servers.start(Tag) as server, StatusReader(server.address) as reader:
        env = DmRpcParallelEnv(server.address, render_mode="rgb_array")
        try:
            env.reset(seed=0)

            def step():
                env.step({a: env.action_space(a).sample() for a in env.agents})
                if not env.agents:
                    env.reset()

            frames, world = watched_frames(reader, step, rounds=3, steps=4)
            assert world["kind"] == "parallel" and world["no_frames"] is None and world["step"] is not None
            assert png_size(frames[0])[0] > 0 and any(bytes(f) != bytes(frames[0]) for f in frames[1:])
        finally:
            env.close()
    with servers.start(probe) as server, StatusReader(server.address) as reader, \
            Stepping(server.address, render_mode="rgb_array", disable_env_checker=True):   # (the probe's
        reader.write_value(WATCH_PROPERTY, json.dumps({"world": "world-1", "fps": 1}))   # scalars warn there)
        world = wait_until(lambda: [w for w in reader.read_json(WATCH_PROPERTY)["worlds"] if w["returns"]])[0]
        assert world["kind"] == "dm_env" and world["episodes"] >= 1
        assert "was asked for render_mode='rgb_array'" in world["no_frames"]


def test_the_server_collects_only_while_a_page_looks(monkeypatch):
    from dmrpc_gym.app.dashboard import feed
    from dmrpc_gym.server.serving import watching
    monkeypatch.setattr(feed, "PAGE_GONE", 0.5)
    monkeypatch.setattr(watching, "LEASE", 1.0)
    with servers.start(Catch) as server, Stepping(server.address), \
            DashboardServer(server.address, interval=0.2) as dash:
        watches = server._registry.watches
        wait_until(lambda: state(dash)["worlds"] and watches.watching)     # a page looks: watched
        assert state(dash)["worlds"][0]["episodes"] >= 0
        wait_until(lambda: not watches.watching, timeout=10)               # nobody looks: the lease ran out
        wait_until(lambda: state(dash) and watches.watching)               # a page looks again


def test_a_godot_world_is_watched_with_its_frames():
    from godot_support import drawing_godot, require_godot
    require_godot()
    if drawing_godot() is None:
        pytest.skip("no godot3 with xvfb-run: Godot frames cannot be drawn")
    server = servers.serve_like_cli("dmrpc_gym.integrations.godot:make_godot_catch")
    try:
        env = gym.make("dmrpc/Remote-v0", address=server.address, render_mode="rgb_array")
        try:
            env.reset(seed=2)
            with StatusReader(server.address) as reader:
                frames, world = watched_frames(reader, lambda: env.step(2), rounds=2, steps=3)
            assert world["no_frames"] is None and world["step"] >= 3
            assert png_size(frames[0]) == (84, 84) and bytes(frames[0]) != bytes(frames[1])
        finally:
            env.close()
    finally:
        server.stop()


def test_a_dm_control_world_is_watched_with_its_frames(monkeypatch):
    pytest.importorskip("dm_control")
    import os
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))
    with servers.serve_like_cli("dm_control/cartpole-balance") as server:
        env = gym.make("dmrpc/Remote-v0", address=server.address, render_mode="rgb_array")
        try:
            env.reset(seed=0)
            with StatusReader(server.address) as reader:
                frames, world = watched_frames(reader, lambda: env.step(env.action_space.sample()), rounds=2, steps=10)
            assert world["kind"] == "dm_env" and world["no_frames"] is None and world["last_reward"] is not None
            assert png_size(frames[0]) == (240, 320) and bytes(frames[0]) != bytes(frames[1])
        finally:
            env.close()
