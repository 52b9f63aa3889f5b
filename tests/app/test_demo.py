"""The demo job (a tiny PPO run) and the bench measurement, against our Catch server."""
from __future__ import annotations

import socket

import numpy as np
import pytest

from dmrpc_gym.app.bench import bench
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch

pytest.importorskip("stable_baselines3")
pytest.importorskip("matplotlib")


def test_quick_demo_run_writes_a_learning_curve(tmp_path, capsys):
    from dmrpc_gym.app.demo import run_demo
    out = tmp_path / "curve.png"
    result = run_demo(total_timesteps=1024, n_envs=2, seed=1, out=out, progress=False, eval_episodes=10,
                      verbose=False)
    assert result["plot"] == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image
    assert matplotlib.image.imread(out).shape == (400, 700, 4)
    assert -1.0 <= result["random_mean_reward"] <= 1.0 and -1.0 <= result["trained_mean_reward"] <= 1.0
    # Every Catch episode ends with +1 or -1, so a mean over 10 episodes is a multiple of 0.2.
    assert np.isclose(result["random_mean_reward"] * 5, round(result["random_mean_reward"] * 5))
    assert result["total_timesteps"] >= 1024 and result["n_envs"] == 2
    # 9-step episodes: about total_timesteps / 9 of them, minus those still running.
    assert 1024 // 9 - 2 <= result["train_episodes"] <= 1024 // 9 + 1
    assert result["train_seconds"] > 0
    assert capsys.readouterr().out == ""          # verbose=False prints nothing


@pytest.fixture(scope="module")
def catch_address():
    with Server(Catch) as server:
        yield server.address


def test_bench_against_catch(catch_address, capsys):
    result = bench(catch_address, steps=200, num_envs=2)
    env, vector = result["env"], result["vector"]
    assert env["steps"] == 200 and env["seconds"] > 0
    assert env["steps_per_second"] == pytest.approx(200 / env["seconds"])
    # 9-step episodes: steps 21..220 (after 20 warm-up steps) finish episodes 3..24.
    assert env["episodes"] == 22
    assert vector["num_envs"] == 2 and vector["steps"] == 200
    # NEXT_STEP autoreset: a 10-step cycle per episode; steps 6..105 finish 10 episodes per sub-env.
    assert vector["episodes"] == 20
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{catch_address}: DmRpcEnv ") and "steps/s" in line and "DmRpcVectorEnv x2" in line
    assert "\n" not in line


def test_bench_single_env_has_no_vector_result(catch_address):
    result = bench(catch_address, steps=30, quiet=True)
    assert result["vector"] is None and result["env"]["steps"] == 30


def test_bench_unreachable_address_is_a_connection_error_naming_it():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(ConnectionError, match=address):
        bench(address, steps=10, connect_timeout=2.0, quiet=True)


def test_cli_bench_prints_one_line(catch_address, capsys):
    from dmrpc_gym.app import cli
    assert cli.main(["bench", catch_address, "--steps", "50", "--num-envs", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{catch_address}: DmRpcEnv ")


def test_cli_bench_refused_setting_is_one_line_and_status_1(catch_address, capsys):
    from dmrpc_gym.app import cli
    assert cli.main(["bench", catch_address, "--setting", "bogus=1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dmrpc-gym bench: error: ") and "bogus" in err and err.count("\n") == 1
