"""Every way a Godot game can fail is a clear error, never a hang, and leaves no process behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import pytest

from dmrpc_gym.integrations.godot import CATCH_PROJECT, GodotEnv, GodotProtocolError, make_godot_catch
from dmrpc_gym.integrations.godot.launch import find_godot
from godot_support import CATCH_OBS, FAULTS_PROJECT, live_games, no_games_left, require_godot  # noqa: F401

require_godot()
pytestmark = pytest.mark.usefixtures("no_games_left")
TREE = Path(__file__).resolve().parents[2]


def faulty(fault: str, **kwargs) -> GodotEnv:
    kwargs.setdefault("connect_timeout", 20.0)
    return GodotEnv(project=FAULTS_PROJECT, scene="res://faults.tscn", observation_space=CATCH_OBS,
                    action_space=gym.spaces.Discrete(3), extra_args=[f"--fault={fault}"], **kwargs)


# -- before the game runs -----------------------------------------------------------------------

def test_a_missing_executable_names_what_was_tried(monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"Godot executable '/opt/none/godot3' \(from godot=\) not found.*apt-get install godot3-server"):
        make_godot_catch(godot="/opt/none/godot3")
    monkeypatch.setenv("DMRPC_GODOT", "/opt/none/godot3-server --verbose")
    with pytest.raises(FileNotFoundError, match=r"'/opt/none/godot3-server' \(from \$DMRPC_GODOT\) not found"):
        make_godot_catch()
    monkeypatch.setenv("DMRPC_GODOT", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FileNotFoundError, match="none of godot3-server, godot3, godot is on PATH"):
        make_godot_catch()


def test_dmrpc_godot_chooses_the_executable(monkeypatch):
    monkeypatch.setenv("DMRPC_GODOT", f"{find_godot()[0]} --quiet")
    env = make_godot_catch()
    try:
        assert env.process.args[:2] == [find_godot()[0], "--quiet"]
    finally:
        env.close()


def test_a_missing_project_or_scene_is_named(tmp_path):
    spaces = dict(observation_space=CATCH_OBS, action_space=gym.spaces.Discrete(3))
    with pytest.raises(FileNotFoundError, match=r"Godot project folder '.*nowhere' does not exist"):
        GodotEnv(project=tmp_path / "nowhere", scene="res://catch.tscn", **spaces)
    with pytest.raises(FileNotFoundError, match="holds no project.godot"):
        GodotEnv(project=tmp_path, scene="res://catch.tscn", **spaces)
    with pytest.raises(FileNotFoundError, match=r"scene 'res://pong.tscn' does not exist .*scenes there: res://catch.tscn, res://catch_box.tscn"):
        GodotEnv(project=CATCH_PROJECT, scene="res://pong.tscn", **spaces)
    with pytest.raises(ValueError, match="must be a path inside the project starting with 'res://'"):
        GodotEnv(project=CATCH_PROJECT, scene="catch.tscn", **spaces)
    assert not live_games()


# -- starting -----------------------------------------------------------------------------------

def test_a_game_that_exits_before_connecting_reports_its_output():
    started = time.monotonic()
    with pytest.raises(ConnectionError) as excinfo:
        faulty("quit")
    message = str(excinfo.value)
    assert "the game exited before connecting" in message and "exited with code 3" in message
    assert "faults: giving up before connecting" in message
    assert time.monotonic() - started < 20                        # it did not wait for connect_timeout


def test_a_game_that_never_connects_times_out_with_its_output():
    with pytest.raises(TimeoutError) as excinfo:
        faulty("idle", connect_timeout=5.0)
    message = str(excinfo.value)
    assert "no game connected to ws://127.0.0.1:" in message and "within 5 s" in message
    assert "faults: idling, never connecting" in message and "still running" in message


def test_a_script_error_shows_in_the_connect_error(tmp_path):
    (tmp_path / "project.godot").write_text('config_version=4\n[application]\nconfig/name="broken"\n')
    (tmp_path / "broken.gd").write_text("extends Node\nfunc _ready(:\n\tpass\n")
    (tmp_path / "broken.tscn").write_text(
        '[gd_scene load_steps=2 format=2]\n[ext_resource path="res://broken.gd" type="Script" id=1]\n'
        '[node name="Broken" type="Node"]\nscript = ExtResource( 1 )\n')
    with pytest.raises(TimeoutError, match=r"(?s)Parse Error.*res://broken.gd"):
        GodotEnv(project=tmp_path, scene="res://broken.tscn", observation_space=CATCH_OBS,
                 action_space=gym.spaces.Discrete(3), connect_timeout=5.0)


# -- mid-episode --------------------------------------------------------------------------------

def test_a_game_killed_mid_episode_is_a_prompt_connection_error():
    env = make_godot_catch(step_timeout=60.0)
    try:
        env.reset(seed=0)
        env.step(1)
        env.process.kill()
        started = time.monotonic()
        with pytest.raises(ConnectionError, match="killed by signal SIGKILL"):
            env.step(1)
        assert time.monotonic() - started < 30                    # not the step timeout
        with pytest.raises(ConnectionError, match="step failed earlier"):
            env.step(1)
    finally:
        env.close()


def test_a_game_that_exits_mid_episode_reports_its_output():
    env = faulty("exit")
    try:
        env.reset()
        with pytest.raises(ConnectionError, match=r"(?s)exited with code 4.*faults: exiting mid-episode"):
            env.step(0)
    finally:
        env.close()


def test_a_stopped_game_times_out_at_step_timeout_and_is_killed_on_close():
    env = make_godot_catch(step_timeout=1.5)
    try:
        env.reset(seed=0)
        os.kill(env.process.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="the game sent no answer within 1.5 s"):
            env.step(1)
        assert 1.0 < time.monotonic() - started < 30
    finally:
        env.close()
    assert env.process.poll() is not None


def test_a_silent_game_times_out():
    env = faulty("silent", step_timeout=1.0)
    try:
        env.reset()
        with pytest.raises(TimeoutError, match=r"(?s)no answer within 1 s.*faults: not answering this step"):
            env.step(0)
    finally:
        env.close()


def test_malformed_json_is_a_protocol_error_showing_the_text():
    env = faulty("malformed")
    try:
        env.reset()
        with pytest.raises(GodotProtocolError, match=r"not valid JSON .*'\{observation: \[0\.5, oops'"):
            env.step(0)
    finally:
        env.close()


def test_an_answer_without_the_protocols_keys_is_a_protocol_error():
    env = faulty("missing")
    try:
        env.reset()
        with pytest.raises(GodotProtocolError, match="lacks 'done'"):
            env.step(0)
    finally:
        env.close()


# -- no process left behind -----------------------------------------------------------------------

def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=TREE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(TREE)})


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("ending", ["exit", "interrupt", "kill"])
def test_games_do_not_outlive_an_interpreter_that_never_closed_them(ending):
    """At exit (also after Ctrl-C) the games are killed; a SIGKILLed interpreter runs no exit
    handler, but its connections drop and the games quit by themselves (as the protocol says)."""
    child = _python(f"""
        import os, signal, time
        from dmrpc_gym.integrations.godot import make_godot_catch
        envs = [make_godot_catch(), make_godot_catch()]
        envs[0].reset(seed=0)
        print(*[env.process.pid for env in envs], flush=True)
        if {ending != "exit"!r}:
            for _ in range(600):                 # interrupted (SIGINT) or killed while the games run (short
                time.sleep(0.1)                  # sleeps: a SIGINT landing just before one is raised after it)
    """)
    pids = [int(pid) for pid in child.stdout.readline().split()]
    assert len(pids) == 2, child.stderr.read()
    if ending != "exit":
        child.send_signal(signal.SIGINT if ending == "interrupt" else signal.SIGKILL)
    child.communicate(timeout=60)
    assert all(_gone(pid) for pid in pids)


def test_an_unreferenced_env_stops_its_game():
    env = make_godot_catch()
    pid = env.process.pid
    del env
    assert _gone(pid)


def test_an_interrupted_step_does_not_shift_later_answers():
    env = make_godot_catch(step_timeout=30.0)
    expected = env.reset(seed=5)[0]

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        os.kill(env.process.pid, signal.SIGSTOP)           # the answer will come late
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            env.step(2)
        os.kill(env.process.pid, signal.SIGCONT)
        obs, _ = env.reset(seed=5)                           # the late step answer is dropped, not returned
        assert obs.tolist() == expected.tolist()
        obs, *_ = env.step(1)
        assert obs[1] > 0.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        env.close()
