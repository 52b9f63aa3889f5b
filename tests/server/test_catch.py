"""The bundled Catch world: rules, determinism, rendering, and its served specs."""
from __future__ import annotations

import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_adaptor
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb
from gymnasium.utils.env_checker import check_env

import servers
from dmrpc_gym.worlds import Catch, make_catch


def _play(env, seed, moves):
    """One episode with a fixed move list (cycled); returns (boards, rewards, flags)."""
    obs, _ = env.reset(seed=seed)
    boards, rewards, flags = [obs], [], []
    for i in range(100):
        obs, reward, terminated, truncated, _ = env.step(np.int8(moves[i % len(moves)]))
        boards.append(obs)
        rewards.append(reward)
        flags.append((terminated, truncated))
        if terminated:
            break
    return boards, rewards, flags


def test_the_ball_falls_one_row_per_step_and_lands_after_rows_minus_one_steps():
    env = Catch()
    boards, rewards, flags = _play(env, 0, [0])
    assert len(rewards) == 9 and flags[-1] == (True, False) and not any(t for t, _ in flags[:-1])
    for step, board in enumerate(boards[:-1]):
        assert board.dtype == np.float32 and board.shape == (10, 10)
        assert board[step].sum() == 1.0             # the ball, on row `step`
        assert board[9].sum() == 1.0 and board[9, 5] == 1.0   # the paddle, still in the middle
    assert rewards[:-1] == [0.0] * 8


def test_reward_is_plus_one_for_a_catch_and_minus_one_for_a_miss():
    env = Catch()
    for seed in range(20):
        _, info = env.reset(seed=seed)
        column = info["ball"][1]
        # Catch: move toward the ball; the paddle has 9 steps to cover at most 5 columns.
        moves = [int(np.sign(column - 5))] * abs(column - 5) + [0] * 9
        _, rewards, _ = _play(env, seed, moves)
        assert rewards[-1] == 1.0, seed
        # Miss: run to the wall farthest from the ball.
        away = -1 if column >= 5 else 1
        _, rewards, _ = _play(env, seed, [away])
        assert rewards[-1] == -1.0, seed


def test_the_paddle_stops_at_the_walls():
    env = Catch(rows=12, columns=4)
    env.reset(seed=1)
    for _ in range(6):
        _, _, _, _, info = env.step({"paddle": np.int8(1)})
    assert info["paddle"] == 3
    for _ in range(5):
        _, _, _, _, info = env.step(-1)  # a bare int works too
    assert info["paddle"] == 0


def test_same_seed_same_trajectories_and_seeds_differ():
    moves = [1, 0, -1, -1, 0, 1]
    a, b = Catch(), Catch()
    for seed in (0, 1, 2, 3):
        first, second = _play(a, seed, moves), _play(b, seed, moves)
        assert all(np.array_equal(x, y) for x, y in zip(first[0], second[0]))
        assert first[1:] == second[1:]
    # Unseeded resets continue the seeded stream: a seeded run of episodes repeats exactly.
    def columns(env, seed):
        env.reset(seed=seed)
        return [env.reset()[1]["ball"][1] for _ in range(20)]
    assert columns(a, 7) == columns(b, 7)
    assert len(set(columns(a, 7))) > 3


def test_rendering_and_errors():
    env = Catch(rows=4, columns=3, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (40, 30, 3) and frame.dtype == np.uint8
    cells = frame[::10, ::10]
    lit = (cells != cells[1, 1]).any(axis=2)  # right after reset the ball is on row 0: (1, 1) is empty
    assert lit[env.ball] and lit[3, env.paddle] and lit.sum() == 2
    with pytest.raises(ValueError, match="render_mode"):
        Catch().render()
    with pytest.raises(ValueError, match="render_mode"):
        Catch(render_mode="human")
    with pytest.raises(ValueError, match="at least 2 rows"):
        Catch(rows=1)
    fresh = Catch()
    with pytest.raises(RuntimeError, match="reset"):
        fresh.step({"paddle": 0})
    fresh.reset()
    with pytest.raises(ValueError, match="-1, 0 or 1"):
        fresh.step({"paddle": 2})
    assert isinstance(make_catch(rows=3), Catch) and make_catch(rows=3).rows == 3


@pytest.mark.filterwarnings("ignore:.*alternative render modes")
def test_passes_gymnasium_env_checker():
    check_env(Catch(render_mode="rgb_array"), skip_render_check=False)


def test_served_specs_are_exactly_the_classic_ones():
    with servers.start(Catch) as server, servers.official(server.address) as conn:
        specs = conn.send(dpb.JoinWorldRequest(world_name="")).specs
        (paddle,) = specs.actions.values()
        assert (paddle.name, paddle.dtype, list(paddle.shape)) == ("paddle", dpb.INT8, [])
        assert paddle.min.int8s.array == bytes([0xFF]) and paddle.max.int8s.array == bytes([1])
        board = specs.observations[1]
        assert (board.name, board.dtype, list(board.shape)) == ("board", dpb.FLOAT, [10, 10])
        assert list(board.min.floats.array) == [0.0] and list(board.max.floats.array) == [1.0]


def test_served_catch_is_deterministic_for_a_seed():
    def trajectory(address, seed):
        with servers.official(address) as conn:
            env, world = dm_env_adaptor.create_and_join_world(conn, {"seed": seed}, {})
            boards, rewards = [], []
            for _ in range(3):
                timestep = env.reset()
                boards.append(timestep.observation["board"])
                i = 0
                while not timestep.last():
                    timestep = env.step({"paddle": np.int8([1, -1, 0][i % 3])})
                    boards.append(timestep.observation["board"])
                    rewards.append(timestep.reward)
                    i += 1
            env.close()
            conn.send(dpb.DestroyWorldRequest(world_name=world))
            return np.array(boards), rewards

    with servers.start(Catch) as server:
        first, second, other = (trajectory(server.address, s) for s in (42, 42, 43))
    assert np.array_equal(first[0], second[0]) and first[1] == second[1]
    assert not np.array_equal(first[0], other[0])
    assert set(first[1]) <= {0.0, 1.0, -1.0} and first[1].count(0.0) == 24
