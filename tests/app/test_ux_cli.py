"""Issue 14, the command line: run as the ``dmrpc-gym`` console script runs it, in real subprocesses.

The console script calls ``dmrpc_gym.app.cli:main`` with ``sys.path`` holding the
script's directory, not the current one; :func:`console` reproduces exactly that
(``python -c`` with an importable tree on PYTHONPATH and the working directory a
temporary one holding ``myenv.py``), without reinstalling the package.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
from console import TREE, Served, console, console_env, start_console

import dmrpc_gym

MYENV = '''
import gymnasium as gym
import numpy as np

class Corridor(gym.Env):
    """Walk right to the exit."""
    def __init__(self, length=8):
        self.length = length
        self.observation_space = gym.spaces.Box(0, length - 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.array([self.pos], np.float32), {}
    def step(self, action):
        self.pos = min(max(self.pos + (1 if action == 1 else -1), 0), self.length - 1)
        done = self.pos == self.length - 1
        return np.array([self.pos], np.float32), float(done), done, False, {}
'''


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "myenv.py").write_text(MYENV)
    return tmp_path


# -- item 1: serving your own env from the console script -------------------------------------------

@pytest.mark.parametrize("target", ["myenv:Corridor", "./myenv.py:Corridor"])
def test_console_script_serves_an_env_of_the_working_directory(workdir, target):
    served = Served(target, workdir)
    try:
        assert served.connect_line == ('connect from Python: import gymnasium as gym, dmrpc_gym; '
                                       f'env = gym.make("dmrpc/Remote-v0", address="{served.address}")')
        # The printed line, pasted: it connects and plays.
        namespace: dict = {}
        exec(served.connect_line.split(": ", 1)[1], namespace)
        env = namespace["env"]
        env.reset(seed=0)
        obs, reward, terminated, *_ = env.step(1)
        assert obs.tolist() == [1.0] and reward == 0.0 and not terminated
        assert env.unwrapped.properties["env_id"].item() == "myenv:Corridor"
        env.close()
    finally:
        assert served.stop() == ""


def test_serve_a_file_path_from_another_directory(workdir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    served = Served(str(workdir / "myenv.py") + ":Corridor", elsewhere)
    served.stop()
    assert served.address.startswith("127.0.0.1:")


def test_serve_a_missing_file_or_module_is_one_line(workdir):
    result = console("serve", "./nosuch.py:Corridor", "--port", "0", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"dmrpc-gym serve: error: no file './nosuch.py' (from './nosuch.py:Corridor'; the current "
        f"directory is {workdir})"]
    result = console("serve", "nosuch:Corridor", "--port", "0", cwd=workdir)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "cannot import module 'nosuch'" in result.stderr


def test_serve_a_pettingzoo_env_whose_dependency_is_missing_is_one_line(workdir):
    (workdir / "needs_missing.py").write_text("import not_installed_anywhere\n")
    result = console("serve", "needs_missing:parallel_env", "--port", "0", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "dmrpc-gym serve: error: cannot import module 'needs_missing' of 'needs_missing:parallel_env': "
        "ModuleNotFoundError: No module named 'not_installed_anywhere'"]


def test_serve_rps_without_pygame_is_one_line(workdir):
    try:
        import pygame  # noqa: F401
        pytest.skip("needs pygame to be missing (rps_v2 imports it; here it is installed, so rps_v2 serves)")
    except ImportError:
        pass
    result = console("serve", "pettingzoo.classic:rps_v2", "--port", "0", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "dmrpc-gym serve: error: cannot load 'rps_v2' from module 'pettingzoo.classic': "
        "ModuleNotFoundError: No module named 'pygame'"]


def test_serve_a_multi_agent_world_prints_a_parallel_env_line(workdir):
    served = Served("dmrpc_gym.worlds:Tag", workdir)
    try:
        assert served.connect_line == (
            f'connect from Python: import dmrpc_gym; env = dmrpc_gym.parallel_env("{served.address}", '
            'agents=["pursuer_0", "pursuer_1", "evader_0", "evader_1"])')
        namespace: dict = {}
        exec(served.connect_line.split(": ", 1)[1], namespace)
        env = namespace["env"]
        env.reset(seed=0)
        env.step({a: env.action_space(a).sample() for a in env.agents})
        env.close()
    finally:
        served.stop()


# -- item 6: serve -v logs worlds and refusals --------------------------------------------------------

def test_serve_verbose_logs_worlds_and_refused_settings(workdir):
    import gymnasium as gym
    from dmrpc_gym import DmRpcError
    served = Served("myenv:Corridor", workdir, "-v")
    try:
        env = gym.make("dmrpc/Remote-v0", address=served.address, world_settings={"length": 4})
        env.close()
        with pytest.raises(DmRpcError):
            gym.make("dmrpc/Remote-v0", address=served.address, world_settings={"lenght": 4})
    finally:
        err = served.stop()
    assert "created world 'world-1' (gym) with length=4" in err
    assert "joined world 'world-1'" in err and "left world 'world-1'" in err
    assert "destroyed world 'world-1'" in err
    assert ("create_world refused: INVALID_ARGUMENT: unknown world setting 'lenght' for myenv:Corridor "
            "(accepted: length, seed)") in err


# -- item 8: CLI edges ---------------------------------------------------------------------------------

def test_version(workdir):
    result = console("--version", cwd=workdir)
    assert result.returncode == 0 and result.stdout.strip() == f"dmrpc-gym {dmrpc_gym.__version__}"


def test_demo_out_in_a_missing_directory_fails_before_training(workdir):
    start = time.monotonic()
    result = console("demo", "--out", "/nonexistent/x.png", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "dmrpc-gym demo: error: --out '/nonexistent/x.png': directory '/nonexistent' does not exist or is not "
        "writable (checked before training)"]
    assert "training" not in result.stdout
    assert time.monotonic() - start < 60


def test_ctrl_c_in_demo_is_one_line_and_status_130(workdir):
    pytest.importorskip("stable_baselines3")
    process = start_console("demo", "--no-progress", "--timesteps", "1000000", cwd=workdir)
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "training PPO" not in line and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, f"demo ended early: {process.stderr.read()}"
        time.sleep(1.0)                           # inside model.learn
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert err.strip().splitlines() == ["dmrpc-gym demo: interrupted"]


# -- item 3 and "also add": bench, inspect, check, record against a multi-agent world ------------------

def test_bench_measures_a_multi_agent_world_as_a_parallel_env(workdir):
    """``bench tag`` (offered by --help) was refused; a multi-agent world is timed in rounds."""
    served = Served("dmrpc_gym.worlds:Tag", workdir)
    try:
        result = console("bench", served.address, "--steps", "20", cwd=workdir)
    finally:
        served.stop()
    assert result.returncode == 0, result.stderr
    assert f"{served.address}: DmRpcParallelEnv (4 agents)" in result.stdout and "rounds/s" in result.stdout
    bundled = console("bench", "tag", "--steps", "20", cwd=workdir)
    assert bundled.returncode == 0 and bundled.stdout.startswith("tag: DmRpcParallelEnv (4 agents)")


def test_inspect_json_lists_every_agent_of_a_multi_agent_world(workdir):
    result = console("inspect", "tag", "--json", "-s", "homogeneous=False", cwd=workdir)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [a["name"] for a in data["agents"]] == ["pursuer_0", "pursuer_1", "evader_0", "evader_1"]
    for agent in data["agents"]:
        assert agent["error"] is None
        assert [a["name"] for a in agent["actions"]] == ["action"]
        assert agent["actions"][0]["space"].startswith("Discrete(5")
    props = {p["key"]: p["value"] for p in data["properties"]}
    assert props["agents"] == ["pursuer_0", "pursuer_1", "evader_0", "evader_1"]
    assert props["missing_agents"] == ["pursuer_1", "evader_0", "evader_1"]   # the report joined alone


def test_inspect_text_lists_agents(workdir):
    result = console("inspect", "tag", cwd=workdir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "Agents (4): pursuer_0, pursuer_1, evader_0, evader_1" in lines
    assert "Actions of 'pursuer_0' (1)" in lines
    assert any(line.startswith("Agent 'pursuer_1': the same specs as 'pursuer_0'") for line in lines)


def test_check_a_gymnasium_world_prints_a_verdict_per_check(workdir):
    served = Served("myenv:Corridor", workdir)
    try:
        result = console("check", served.address, cwd=workdir)
    finally:
        served.stop()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{served.address}: gymnasium env"
    names = [line.split(maxsplit=1)[1].split(":")[0] for line in lines[1:-1]]
    assert names == ["action space", "observation space", "reset return type", "reset seed determinism",
                     "reset options", "reset (passive checker)", "step (passive checker)", "step determinism",
                     "returned data not reused", "close twice"]
    assert lines[-1] == "10 checks: 10 ok, 0 with warnings, 0 failed"


def test_check_fails_a_world_whose_seed_does_not_reach_the_server(workdir):
    served = Served("CartPole-v1", workdir, "--render", "none")
    try:
        result = console("check", served.address, "--seed-setting", "", cwd=workdir)
    finally:
        served.stop()
    assert result.returncode == 1
    assert "  FAIL  step determinism: AssertionError: Deterministic step observations are not equivalent" \
        in result.stdout
    assert "  warn  observation space: WARN: A Box observation space minimum value is -infinity." in result.stdout


def test_check_a_multi_agent_world_runs_pettingzoos_tests(workdir):
    result = console("check", "tag", "-s", "max_steps=30", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        result.stdout.splitlines()[0],
        "  ok    parallel_api_test", "  ok    parallel_seed_test", "2 checks: 2 ok, 0 with warnings, 0 failed"]
    assert "PettingZoo ParallelEnv (4 agents: pursuer_0, pursuer_1, evader_0, evader_1)" in result.stdout


def test_record_a_gif_with_a_progress_bar(workdir):
    from PIL import Image
    result = console("record", "catch", "--out", "run.gif", "--steps", "20", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "wrote run.gif: 21 frames, 2 episodes ended"
    assert "recording" in result.stdout and "20/20" in result.stdout      # the progress bar's last state
    with Image.open(workdir / "run.gif") as gif:
        assert gif.n_frames == 21 and gif.size == (300, 300)   # 100x100 frames, scaled x3


def test_record_an_mp4(workdir):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="mp4 needs the video extra (imageio-ffmpeg)")
    result = console("record", "tag", "--out", "tag.mp4", "--steps", "15", "--no-progress", cwd=workdir)
    assert result.returncode == 0, result.stderr
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(workdir / "tag.mp4"))
    assert frames == 16


def test_record_a_saved_model(workdir):
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    from stable_baselines3 import PPO
    from dmrpc_gym.integrations.flat_spaces import FlatSpaces
    env = FlatSpaces(gym.make("dmrpc/Catch-v0"))
    PPO("MlpPolicy", env, n_steps=64, device="cpu").save(workdir / "model.zip")
    env.close()
    result = console("record", "catch", "--out", "m.gif", "--steps", "9", "--model", "model.zip",
                     "--no-progress", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "wrote m.gif: 10 frames, 1 episodes ended"


def test_record_bad_output_is_refused_before_playing(workdir):
    result = console("record", "catch", "--out", "run.avi", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.strip() == "dmrpc-gym record: error: --out 'run.avi': expected a file ending in .gif or .mp4"


def test_gymnasium_module_id_form_imports_the_package(workdir):
    """Item 8: without ``import dmrpc_gym`` the namespace is unknown; the documented ``module:id`` form works."""
    code = ("import gymnasium as gym\n"
            "try:\n    gym.make('dmrpc/Catch-v0')\nexcept gym.error.NamespaceNotFound as e:\n    print('refused:', e)\n"
            "env = gym.make('dmrpc_gym:dmrpc/Catch-v0')\nprint(env.reset(seed=0)[0].shape)\nenv.close()\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=console_env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("refused: Namespace dmrpc not found.")
    assert result.stdout.splitlines()[1] == "(10, 10)"
    guide = (Path(TREE) / "docs" / "guides" / "gymnasium.md").read_text()
    assert 'gym.make("dmrpc_gym:dmrpc/Catch-v0")' in guide


# -- issue 21's smaller frictions --------------------------------------------------------------------------

def test_serve_ctrl_c_stops_quietly_and_verbose_logs_no_probe(workdir):
    """The serving line once (not again as a log line), no refused-extension log for the client's
    own probe of a single-agent world, and Ctrl-C stops the server with status 0, as the README says."""
    import gymnasium as gym
    served = Served("myenv:Corridor", workdir, "-v")
    env = gym.make("dmrpc/Remote-v0", address=served.address)
    env.close()
    err = served.stop()
    assert served.process.returncode == 0
    assert "serving" not in err and "Traceback" not in err and "refused" not in err and "joined world" in err


def test_demo_refuses_bad_counts_and_a_missing_sb3_in_one_line(workdir, monkeypatch, capsys):
    from dmrpc_gym.app import cli
    assert cli.main(["demo", "--envs", "0"]) == 1
    assert capsys.readouterr().err.strip() == "dmrpc-gym demo: error: --envs 0: expected at least 1"
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "stable_baselines3" else real(name, *a))
    assert cli.main(["demo", "--timesteps", "10"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stable_baselines3 not installed" in err[0] and 'pip install -e "' in err[0]


def test_serve_names_a_missing_tls_file(workdir):
    result = console("serve", "CartPole-v1", "--port", "0", "--tls-cert", "nope.pem", "--tls-key", "nope.key",
                     cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("dmrpc-gym serve: error: --tls-cert 'nope.pem': no such file")


def test_inspect_json_bounds_are_numbers_and_lists_and_bundled_worlds_go_by_name(workdir):
    result = console("inspect", "catch", "--json", cwd=workdir)
    report = json.loads(result.stdout)
    paddle = report["actions"][0]
    assert (paddle["min"], paddle["max"]) == (-1, 1) and report["address"] == "catch"
    board = report["observations"][0]
    assert (board["min"], board["max"]) == (0.0, 1.0)
    check = console("check", "catch", cwd=workdir)
    assert check.stdout.startswith("catch: ")


def test_package_metadata_a_user_looks_for():
    import configparser
    import pickle

    import gymnasium as gym
    from dmrpc_gym._extras import install_hint
    root = Path(__file__).resolve().parents[2]
    assert (root / "dmrpc_gym" / "py.typed").is_file()
    config = configparser.ConfigParser()
    config.read(root / "setup.cfg")
    assert "py.typed" in config["options.package_data"]["dmrpc_gym"]
    assert "jupyterlab" in config["options.extras_require"]["notebooks"]
    assert install_hint("rllib").startswith("pip install -e ") and install_hint("rllib").endswith('[rllib]"')
    assert {"DmRpcEnv", "DmRpcParallelEnv", "parallel_env", "DmRpcVectorEnv"} <= set(dir(dmrpc_gym))
    env = gym.make("dmrpc/Catch-v0")
    try:
        copy = pickle.loads(pickle.dumps(env.unwrapped))
        assert copy.spec is not None and copy.spec.id == "dmrpc/Catch-v0"
        copy.close()
    finally:
        env.close()


def test_the_readme_links_nothing_outside_the_repository():
    import re
    root = Path(__file__).resolve().parents[2]
    text = (root / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text) + re.findall(r"`(\.\./[^`]+)`", text):
        if "://" in target:
            continue
        assert (root / target).resolve().is_relative_to(root) and (root / target).exists(), target



# -- issue 33: one name per thing on the command line ------------------------------------------------

@pytest.mark.parametrize("world, line", [
    ("catch", 'import gymnasium as gym, dmrpc_gym; env = gym.make("dmrpc/Remote-v0"'),
    ("tag", "import dmrpc_gym; env = dmrpc_gym.parallel_env("),
])
def test_serve_takes_the_bundled_worlds_by_the_client_commands_names(workdir, world, line):
    served = Served(world, workdir)
    try:
        assert line in served.connect_line
        result = console("inspect", served.address, "--json", cwd=workdir)
        assert result.returncode == 0, result.stderr
    finally:
        assert served.stop() == ""


def test_serve_help_lists_every_kind_of_target_with_an_example(workdir):
    result = console("serve", "--help", cwd=workdir)
    assert result.returncode == 0
    for example in ("dmrpc-gym serve catch", "dmrpc-gym serve CartPole-v1", "dmrpc-gym serve dmrpc_gym.worlds:Catch",
                    "dmrpc-gym serve ./envs/myenv.py:Corridor", "dmrpc-gym serve pettingzoo.butterfly.pistonball_v6",
                    "dmrpc-gym serve pettingzoo.classic.tictactoe_v3:env",
                    "dmrpc-gym serve dm_control/cartpole-balance", "dmrpc-gym serve bsuite/catch/0"):
        assert example in result.stdout, example


def test_serve_renders_offscreen_and_sdl_says_nothing_of_a_missing_session(workdir, monkeypatch):
    """A client rendering a pygame env (CartPole) through ``serve`` on a machine with no desktop
    session: SDL's video driver is its dummy one in the server, so SDL prints no
    ``error: XDG_RUNTIME_DIR is invalid or not set`` (issue 42), and the frame is the env's."""
    monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    served = Served("CartPole-v1", workdir)
    try:
        env = gym.make("dmrpc/Remote-v0", address=served.address, render_mode="rgb_array")
        env.reset(seed=1)
        frame = env.render()
        env.close()
    finally:
        said = served.stop()
    assert frame.shape == (400, 600, 3) and frame.any()
    assert "XDG_RUNTIME_DIR" not in said, said


@pytest.mark.parametrize("columns", [80, 120])
def test_inspect_fits_its_tables_to_the_terminal(workdir, columns, monkeypatch):
    """``inspect`` tables as wide as the terminal ($COLUMNS; issue 42: 215 characters before): the
    last columns (bounds and spaces, values and descriptions) wrap in their cells."""
    monkeypatch.setenv("COLUMNS", str(columns))
    done = console("inspect", "tag", cwd=workdir)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and any("gymnasium space" in line for line in lines), done.stderr
    assert max(map(len, lines)) <= columns, max(lines, key=len)


def test_a_client_command_that_gives_up_names_its_option_wait(workdir):
    """The give-up line of a client command names ``--wait`` (its option), not the Python
    argument ``connect_timeout`` behind it (issue 42)."""
    from processes import free_port
    done = console("inspect", f"127.0.0.1:{free_port()}", "--wait", "0.5", cwd=workdir)
    assert done.returncode == 1 and "(--wait)" in done.stderr and "connect_timeout" not in done.stderr, done.stderr


def test_a_mistyped_module_target_says_it_was_tried_as_one_and_suggests(workdir):
    done = console("serve", "pettingzoo.butterfly.pistonbal_v6", "--port", "0", cwd=workdir)
    assert done.returncode == 1
    assert "neither a gymnasium env id nor a module that imports" in done.stderr, done.stderr
    assert "did you mean 'pettingzoo.butterfly.pistonball_v6'?" in done.stderr, done.stderr
