"""``dmrpc-gym status ADDRESS`` (issue 34, item 5): against our server while a client steps (plain, --json,
--watch, a token, TLS, a Unix socket), and against a foreign server written with the official
dm-env-rpc package, which must be refused clearly."""
from __future__ import annotations

import json
import signal
import threading

import gymnasium as gym
import numpy as np
import pytest

import dmrpc_gym  # noqa: F401 - registers dmrpc/Remote-v0
import servers
from dmrpc_gym.app.cli import main
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.worlds.catch import Catch
from console import start_console
from interop_peers import self_signed
from official_servers import start_official_server



class Stepping:
    """A client stepping a world of ``address`` on a thread until the block ends (at least one episode first)."""

    def __init__(self, address: str, **kwargs):
        self.env = gym.make("dmrpc/Remote-v0", address=address, world_settings={"rows": 5}, **kwargs)
        self.env.reset(seed=0)
        self.stop, self.steps, self.started = threading.Event(), 0, threading.Event()
        self.requests = 1            # StepRequests sent: every step, and the one each reset starts a sequence with
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            _, _, terminated, truncated, _ = self.env.step(np.int64(1))
            self.steps += 1
            self.requests += 1
            if self.steps >= 10:
                self.started.set()
            if terminated or truncated:
                self.env.reset()
                self.requests += 1

    def __enter__(self) -> "Stepping":
        self.thread.start()
        assert self.started.wait(30), "the client did not step"
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)
        self.env.close()


def status(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["status", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_status_shows_health_worlds_and_steps_per_second(capsys):
    with servers.start(Catch) as server, Stepping(server.address):
        code, out, err = status(capsys, server.address, "--interval", "0.5")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("dmrpc-gym/") and f"at {server.address}, serving dmrpc_gym.worlds.catch:Catch" in lines[0]
    assert lines[1] == "health       SERVING"
    assert lines[2].startswith("connections  2 (2 streams)")        # the client's and status' own
    assert lines[3].startswith("worlds       1 of 1,024 at most; made 1, destroyed 0")
    header = next(i for i, line in enumerate(lines) if line.startswith("WORLD"))
    assert header > 0 and lines[header].split() == ["WORLD", "KIND", "AGENTS", "STEPS", "STEPS/S", "STEP", "MS",
                                                    "ENV", "MS", "SETTINGS"]
    row = lines[header + 1].split()
    assert row[:3] == ["world-1", "gym", "1"] and row[-1] == "rows=5"
    assert float(row[4].replace(",", "")) > 0          # steps/s over the interval: the client stepped
    assert float(row[5]) > 0 and float(row[6]) >= 0    # step time in all and in the env, in ms


def test_status_json_for_scripts(capsys):
    with servers.start(Catch) as server, Stepping(server.address) as client:
        code, out, err = status(capsys, server.address, "--json", "--interval", "0.3")
        sent = client.requests
    assert code == 0, err
    doc = json.loads(out)
    assert doc["health"] == {"serving": True, "draining": False, "why": ""}
    assert doc["env"] == "dmrpc_gym.worlds.catch:Catch" and doc["connections"] == 2
    [world] = doc["worlds"]
    assert world["name"] == "world-1" and world["kind"] == "gym" and world["agents"] == 1
    assert world["settings"] == {"rows": "5"}
    assert 0 < world["steps"] <= sent                    # StepRequests answered before the client counted them
    assert world["steps_per_second"] > 0 and world["step_ms"] > 0 and doc["interval"] >= 0.3
    assert doc["totals"]["gym"]["steps"] >= world["steps"] and doc["totals"]["gym"]["created"] == 1


def test_status_with_a_token(capsys, monkeypatch):
    monkeypatch.delenv("DMRPC_GYM_TOKEN", raising=False)
    with servers.start(Catch, token="s3cret") as server:
        code, out, err = status(capsys, server.address, "--interval", "0")
        assert code == 1 and "UNAUTHENTICATED" in err and "token" in err and out == ""
        code, out, err = status(capsys, server.address, "--interval", "0", "--token", "s3cret", "--json")
        assert code == 0, err
        assert json.loads(out)["errors"] == {"UNAUTHENTICATED": 1}    # the first try, counted


def test_status_over_tls_and_a_unix_socket(capsys, tmp_path):
    cert, key = self_signed(tmp_path)
    with servers.start(Catch, tls=(cert, key)) as server:
        code, out, err = status(capsys, server.address, "--interval", "0", "--tls-ca", cert, "--json")
        assert code == 0, err
        assert json.loads(out)["health"]["serving"] is True
    with servers.start(Catch, address=f"unix:{tmp_path / 'world.sock'}") as server:
        code, out, err = status(capsys, server.address, "--interval", "0")
        assert code == 0, err
        assert out.splitlines()[1] == "health       SERVING"


def test_a_server_at_its_limit_of_worlds_is_not_serving(capsys):
    with servers.start(Catch, max_worlds=1) as server, Connection(server.address) as conn:
        conn.send(pb.CreateWorldRequest())
        code, out, err = status(capsys, server.address, "--interval", "0")
    assert code == 0, err
    assert out.splitlines()[1].startswith("health       NOT SERVING (this server holds 1 worlds, its limit (max_worlds)")


def test_a_foreign_server_is_refused_clearly(capsys):
    with start_official_server() as server:
        code, out, err = status(capsys, server.address, "--interval", "0")
    assert code == 1 and out == ""
    assert "is not a dmrpc_gym server" in err
    assert "'dmrpc_gym.server_status'" in err and "UNIMPLEMENTED" in err


def test_watch_refreshes_until_interrupted(tmp_path):
    with servers.start(Catch) as server, Stepping(server.address):
        proc = start_console("status", server.address, "--watch", "--json", "--interval", "0.2", cwd=tmp_path)
        try:
            docs = [json.loads(proc.stdout.readline()) for _ in range(3)]
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err
    steps = [doc["worlds"][0]["steps"] for doc in docs]
    assert steps == sorted(steps) and steps[-1] > steps[0]      # each line a new reading
    assert all(doc["worlds"][0]["steps_per_second"] > 0 for doc in docs)


def test_watch_needs_an_interval(capsys):
    code, _, err = status(capsys, "127.0.0.1:1", "--watch", "--interval", "0")
    assert code == 1 and "--interval 0.0: expected seconds > 0" in err


def test_a_draining_server_says_so(capsys):
    with servers.start(Catch) as server:
        holder = gym.make("dmrpc/Remote-v0", address=server.address)
        holder.reset(seed=0)           # an episode that runs: the drain waits for it (it starts no other)
        drainer = threading.Thread(target=server.drain, args=(30.0,), daemon=True)
        drainer.start()
        for _ in range(200):
            if server.draining:
                break
            threading.Event().wait(0.05)
        code, out, err = status(capsys, server.address, "--json", "--interval", "0")
        holder.close()                 # its episode left: the drain ends
    drainer.join(30)
    assert code == 0, err
    health = json.loads(out)["health"]
    assert health["serving"] is False and health["draining"] is True and "draining" in health["why"]
