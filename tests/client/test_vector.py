"""DmRpcVectorEnv and DmRpcSB3VecEnv against real servers: autoreset, seeds, partial resets, errors."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space

from dmrpc_gym import DmRpcError, State
from dmrpc_gym.worlds.embedded import embedded_server
from dmrpc_gym.server import Server
from dmrpc_gym.client.fanout import Batch
from dmrpc_gym.client.vector import DmRpcVectorEnv, batch_observations, merge_infos


class Countdown(gym.Env):
    """Observation ``[t, last action + 1]``; ends after ``length`` steps; action 2 makes ``step`` raise.

    The reward ``10 * t + action`` tells steps apart; a fresh episode shows ``[0, 0]``.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 3, ending: str = "terminate"):
        self.length, self.ending = int(length), str(ending)
        self.observation_space = spaces.Box(0.0, 100.0, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.t = self.last = 0

    def _obs(self):
        return np.array([self.t, self.last], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = self.last = 0
        return self._obs(), {}

    def step(self, action):
        if int(action) == 2:
            raise RuntimeError("boom: action 2")
        self.t += 1
        self.last = int(action) + 1
        done = self.t >= self.length
        return (self._obs(), float(10 * self.t + int(action)), done and self.ending == "terminate",
                done and self.ending == "truncate", {})


class Rover(gym.Env):
    """A Dict observation (Box + Discrete) and a bare Discrete action."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Dict({"pos": spaces.Box(-5.0, 5.0, (2,), np.float32),
                                              "steps": spaces.Discrete(50)})
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"pos": np.zeros(2, np.float32), "steps": 0}, {}

    def step(self, action):
        self.t += 1
        return {"pos": np.full(2, int(action), np.float32), "steps": self.t}, 0.0, False, False, {}


@pytest.fixture(scope="module")
def countdown():
    server = Server(Countdown).start()
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def catch_address():
    return embedded_server("catch").address


def countdown_envs(server, n=2, **kwargs):
    kwargs.setdefault("world_settings", {"length": 2})
    return DmRpcVectorEnv(n, server.address, **kwargs)


# -- spaces and batching --------------------------------------------------------------
def test_spaces_and_metadata(countdown):
    envs = countdown_envs(countdown, 3)
    try:
        assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert envs.single_observation_space == spaces.Box(0.0, 100.0, (2,), np.float32)
        assert envs.single_action_space == spaces.Discrete(3)
        assert envs.observation_space == batch_space(envs.single_observation_space, 3)
        assert envs.action_space == spaces.MultiDiscrete([3, 3, 3])
        obs, infos = envs.reset()
        assert obs.shape == (3, 2) and obs.dtype == np.float32 and envs.observation_space.contains(obs)
        assert envs.get_attr("last_discount") == (1.0,) * 3 and "discount" not in infos
        assert envs.get_attr("state") == (State.RUNNING,) * 3
    finally:
        envs.close()


def test_dict_observations_are_batched_per_key():
    server = Server(Rover).start()
    envs = DmRpcVectorEnv(3, server.address)
    try:
        assert isinstance(envs.single_observation_space, spaces.Dict)
        obs, _ = envs.reset()
        assert set(obs) == {"pos", "steps"}
        assert obs["pos"].shape == (3, 2) and obs["pos"].dtype == np.float32
        assert obs["steps"].tolist() == [0, 0, 0]
        obs, *_ = envs.step(np.array([1, 0, 1]))
        assert obs["pos"].tolist() == [[1, 1], [0, 0], [1, 1]]
        assert obs["steps"].tolist() == [1, 1, 1]
        assert envs.observation_space.contains(obs)
    finally:
        envs.close()
        server.stop(grace=0)


def test_batch_observations_and_merge_infos_match_gymnasium():
    space = spaces.Dict({"a": spaces.Box(0, 1, (2,)), "b": spaces.Tuple((spaces.Discrete(4), spaces.MultiBinary(3)))})
    items = [space.sample() for _ in range(4)]
    ours = batch_observations(space, items)
    theirs = gym.vector.utils.concatenate(space, items, gym.vector.utils.create_empty_array(space, 4))
    assert ours["a"].dtype == theirs["a"].dtype and np.array_equal(ours["a"], theirs["a"])
    for x, y in zip(ours["b"], theirs["b"]):
        assert x.dtype == y.dtype and np.array_equal(x, y)

    class Probe(gym.vector.VectorEnv):
        num_envs = 3
    infos = [(0, {"discount": 1.0, "state": State.RUNNING, "x": np.arange(2)}),
             (2, {"discount": 0.0, "nested": {"k": 1}})]
    expected: dict = {}
    for i, info in infos:
        expected = Probe()._add_info(expected, info, i)
    merged = merge_infos(infos, 3)
    assert merged.keys() == expected.keys()
    for key in ("discount", "_discount", "x", "_x", "_state", "_nested"):
        assert merged[key].dtype == expected[key].dtype and np.array_equal(merged[key], expected[key])
    assert list(merged["state"]) == list(expected["state"])
    assert np.array_equal(merged["nested"]["k"], expected["nested"]["k"])


# -- autoreset -------------------------------------------------------------------------
def test_next_step_autoreset_ignores_the_action_of_a_finished_env(countdown):
    envs = countdown_envs(countdown, 2)
    try:
        obs, _ = envs.reset()
        obs, rew, term, trunc, _ = envs.step(np.array([0, 1]))
        assert obs.tolist() == [[1, 1], [1, 2]] and rew.tolist() == [10, 11]
        # Offset env 1 by one step: it alone starts over.
        obs, infos = envs.reset(options={"reset_mask": np.array([False, True])})
        assert obs.tolist() == [[1, 1], [0, 0]] and infos == {}      # the served env's own (empty) info
        obs, rew, term, trunc, infos = envs.step(np.array([1, 1]))
        assert obs.tolist() == [[2, 2], [1, 2]] and term.tolist() == [True, False]
        assert rew.tolist() == [21, 11] and not trunc.any()
        assert envs.get_attr("last_discount") == (0.0, 1.0)
        # Env 0 finished: action 2 would make the server raise, but it is ignored.
        obs, rew, term, trunc, infos = envs.step(np.array([2, 0]))
        assert obs.tolist() == [[0, 0], [2, 1]]
        assert rew.tolist() == [0.0, 20.0] and term.tolist() == [False, True] and not trunc.any()
        assert envs.get_attr("state")[0] == State.RUNNING and envs.get_attr("last_discount")[0] == 1.0
        obs, rew, term, trunc, _ = envs.step(np.array([1, 2]))
        assert obs.tolist() == [[1, 2], [0, 0]] and rew.tolist() == [11, 0] and not term.any()
    finally:
        envs.close()


@pytest.mark.parametrize("ending", ["terminate", "truncate"])
def test_same_results_as_gymnasium_sync_vector_env_over_local_envs(countdown, ending):
    settings = {"length": 3, "ending": ending}
    ours = countdown_envs(countdown, 3, world_settings=settings)
    reference = SyncVectorEnv([lambda: Countdown(**settings) for _ in range(3)])
    rng = np.random.default_rng(0)
    try:
        a, _ = ours.reset()
        b, _ = reference.reset()
        assert np.array_equal(a, b)
        for t in range(12):
            actions = rng.integers(0, 2, 3)
            mine, theirs = ours.step(actions), reference.step(actions)
            for x, y in zip(mine[:4], theirs[:4]):
                assert np.array_equal(x, y), t
            assert mine[1].dtype == theirs[1].dtype == np.float64
    finally:
        ours.close()
        reference.close()


def test_client_side_max_episode_steps_truncates_and_restarts(countdown):
    envs = countdown_envs(countdown, 2, world_settings={"length": 50}, max_episode_steps=2)
    try:
        envs.reset()
        envs.step(np.array([0, 0]))
        obs, rew, term, trunc, _ = envs.step(np.array([1, 1]))
        assert trunc.tolist() == [True, True] and not term.any() and obs[:, 0].tolist() == [2, 2]
        obs, rew, term, trunc, _ = envs.step(np.array([1, 1]))   # the server was still running: reset
        assert obs.tolist() == [[0, 0], [0, 0]] and rew.tolist() == [0, 0] and not trunc.any()
    finally:
        envs.close()


# -- seeds and partial resets ------------------------------------------------------------
def catch_rollout(envs, seed, steps=25):
    rng = np.random.default_rng(1)
    obs, _ = envs.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, rew, term, trunc, _ = envs.step(rng.integers(-1, 2, envs.num_envs).astype(np.int8))
        out += [obs, rew, term, trunc]
    return out


def test_same_seed_same_trajectories_and_different_envs_differ(catch_address):
    a = gym.make_vec("dmrpc/Catch-v0", num_envs=4, vectorization_mode="vector_entry_point")
    b = DmRpcVectorEnv(4, catch_address, seed_setting="seed")
    try:
        first, second = catch_rollout(a, 7), catch_rollout(b, 7)
        assert all(np.array_equal(x, y) for x, y in zip(first, second))
        columns = first[0][:, 0].argmax(axis=1)         # the ball's starting column per env
        assert len(set(columns.tolist())) > 1
        obs_list, _ = b.reset(seed=[7, 8, 9, 10])
        assert np.array_equal(obs_list, first[0])
        assert not all(np.array_equal(x, y) for x, y in zip(first, catch_rollout(b, 8)))
    finally:
        a.close()
        b.close()


def test_partial_reset_with_reset_mask(catch_address):
    envs = DmRpcVectorEnv(3, catch_address, seed_setting="seed")
    try:
        envs.reset(seed=0)
        before, *_ = envs.step(np.array([1, 1, 1], np.int8))
        obs, infos = envs.reset(seed=0, options={"reset_mask": np.array([True, False, True])})
        other = DmRpcVectorEnv(3, catch_address, seed_setting="seed")
        fresh, _ = other.reset(seed=0)
        other.close()
        assert np.array_equal(obs[[0, 2]], fresh[[0, 2]])
        assert np.array_equal(obs[1], before[1])
        assert infos["_ball"].tolist() == [True, False, True]
        with pytest.raises(TypeError, match="reset_mask"):
            envs.reset(options={"reset_mask": [True, False, True]})
        with pytest.raises(ValueError, match="shape"):
            envs.reset(options={"reset_mask": np.array([True, False])})
        with pytest.raises(ValueError, match="at least one"):
            envs.reset(options={"reset_mask": np.zeros(3, bool)})
        fresh_envs = DmRpcVectorEnv(2, catch_address)
        with pytest.raises(RuntimeError, match="never reset"):
            fresh_envs.reset(options={"reset_mask": np.array([True, False])})
        fresh_envs.close()
    finally:
        envs.close()


def test_partial_reset_clears_a_pending_autoreset(countdown):
    envs = countdown_envs(countdown, 2, world_settings={"length": 1})
    try:
        envs.reset()
        _, _, term, _, _ = envs.step(np.array([0, 0]))
        assert term.all()
        envs.reset(options={"reset_mask": np.array([True, False])})
        obs, rew, term, _, _ = envs.step(np.array([1, 1]))
        assert obs.tolist() == [[1, 2], [0, 0]]       # env 0 stepped, env 1 autoreset
        assert rew.tolist() == [11, 0] and term.tolist() == [True, False]
    finally:
        envs.close()


# -- errors ---------------------------------------------------------------------------------
def test_bad_action_for_one_env_is_refused_before_anything_is_sent(countdown):
    envs = countdown_envs(countdown, 3, world_settings={"length": 9})
    try:
        envs.reset()
        with pytest.raises(ValueError, match="sub-env 1"):
            envs.step(np.array([0, 7, 0]))
        obs, *_ = envs.step(np.array([0, 0, 0]))
        assert obs[:, 0].tolist() == [1, 1, 1]            # nothing of the bad step reached any server
        with pytest.raises(ValueError, match="2 actions given for 3"):
            envs.step(np.array([0, 0]))
    finally:
        envs.close()


def test_server_error_mid_step_is_dmrpc_error_and_the_env_goes_on(countdown):
    envs = countdown_envs(countdown, 3, world_settings={"length": 9})
    try:
        envs.reset()
        with pytest.raises(DmRpcError, match="sub-env 1") as err:
            envs.step(np.array([0, 2, 0]))                # action 2 makes Countdown.step raise
        assert err.value.code_name == "INTERNAL" and "boom" in str(err.value)
        obs, _ = envs.reset()
        assert obs.tolist() == [[0, 0]] * 3
        obs, *_ = envs.step(np.array([1, 1, 1]))
        assert obs.tolist() == [[1, 2]] * 3
    finally:
        envs.close()


def test_answers_left_unread_are_dropped_before_the_next_exchange(countdown):
    batch = Batch(2, countdown.address, world_settings={"length": 9})
    try:
        batch.reset([0, 1], seeds=[None, None])
        plan = batch.submit({0: 1, 1: 1})
        read = batch._read

        def interrupted(i):
            raise KeyboardInterrupt              # Ctrl-C before any answer was read
        batch._read = interrupted
        with pytest.raises(KeyboardInterrupt):
            batch.receive(plan)
        batch._read = read
        assert batch.in_flight == {}              # abandoned: read and dropped by the next exchange
        results = batch.step({0: 0, 1: 0})
        assert [results[i][0].tolist() for i in (0, 1)] == [[2, 1], [2, 1]]
        assert [results[i][1] for i in (0, 1)] == [20.0, 20.0]
    finally:
        batch.close()


_KILLABLE = textwrap.dedent("""
    import sys, time
    from dmrpc_gym.server import Server
    from dmrpc_gym.worlds.catch import Catch
    server = Server(Catch).start()
    print(server.address, flush=True)
    time.sleep(60)
""")


def test_dead_server_raises_connection_error_and_close_returns():
    proc = subprocess.Popen([sys.executable, "-c", _KILLABLE], stdout=subprocess.PIPE, text=True)
    try:
        address = proc.stdout.readline().strip()
        envs = DmRpcVectorEnv(3, address, step_timeout=5)
        envs.reset()
        proc.kill()
        proc.wait(5)
        with pytest.raises(ConnectionError):
            for _ in range(3):
                envs.step(np.zeros(3, np.int8))
        envs.close()
        envs.close()
        assert envs.closed
        with pytest.raises(RuntimeError, match="closed"):
            envs.step(np.zeros(3, np.int8))
    finally:
        proc.kill()


def test_interpreter_exits_promptly_with_vector_envs_left_open():
    code = textwrap.dedent("""
        import numpy as np
        from dmrpc_gym.worlds.embedded import embedded_server
        from dmrpc_gym.client.fanout import Batch
        from dmrpc_gym.client.vector import DmRpcVectorEnv
        envs = DmRpcVectorEnv(3, embedded_server("catch").address)
        envs.reset()
        batch = Batch(2, embedded_server("catch").address)
        print("left open")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "left open", out.stderr


def test_unreachable_server_is_connection_error():
    with pytest.raises(ConnectionError, match="127.0.0.1:1"):
        DmRpcVectorEnv(2, "127.0.0.1:1", connect_timeout=1)


def test_bad_arguments_are_named(catch_address):
    with pytest.raises(ValueError, match="num_envs"):
        DmRpcVectorEnv(0, catch_address)
    with pytest.raises(ValueError, match="not both"):
        DmRpcVectorEnv(2, catch_address, addresses=[catch_address])
    with pytest.raises(ValueError, match="seeds"):
        envs = DmRpcVectorEnv(2, catch_address)
        try:
            envs.reset(seed=[1, 2, 3])
        finally:
            envs.close()


# -- construction paths -------------------------------------------------------------------
def test_make_vec_remote_with_vector_entry_point(countdown):
    envs = gym.make_vec("dmrpc/Remote-v0", num_envs=8, vectorization_mode="vector_entry_point",
                        address=countdown.address, world_settings={"length": 2})
    try:
        assert isinstance(envs, DmRpcVectorEnv) and envs.num_envs == 8
        assert envs.spec.id == "dmrpc/Remote-v0"
        obs, _ = envs.reset()
        assert obs.shape == (8, 2)
        obs, *_ = envs.step(np.ones(8, np.int64))
        assert obs.tolist() == [[1, 2]] * 8
    finally:
        envs.close()


def test_make_vec_catch_and_render():
    envs = gym.make_vec("dmrpc/Catch-v0", num_envs=4, vectorization_mode="vector_entry_point",
                        render_mode="rgb_array")
    try:
        assert isinstance(envs, DmRpcVectorEnv) and envs.num_envs == 4
        envs.reset(seed=1)
        envs.step(np.zeros(4, np.int8))
        frames = envs.render()
        assert isinstance(frames, tuple) and len(frames) == 4
        assert all(f.shape == (100, 100, 3) and f.dtype == np.uint8 for f in frames)
    finally:
        envs.close()


def test_addresses_are_used_in_turn(countdown, catch_address):
    other = Server(Countdown).start()
    envs = DmRpcVectorEnv(addresses=[countdown.address, other.address])
    try:
        assert envs.num_envs == 2
        assert [e.connection.address for e in envs.envs] == [countdown.address, other.address]
        assert envs.get_attr("world_name")[0] and envs.call("render") == (None, None)
        with pytest.raises(RuntimeError, match="space"):
            DmRpcVectorEnv(addresses=[countdown.address, catch_address])
    finally:
        envs.close()
        other.stop(grace=0)


# -- Stable-Baselines3 -----------------------------------------------------------------------
def test_sb3_vec_env_resets_within_the_step_with_terminal_observation(countdown):
    from stable_baselines3.common.vec_env import VecEnv
    from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv

    venv = DmRpcSB3VecEnv(2, countdown.address, world_settings={"length": 2})
    try:
        assert isinstance(venv, VecEnv) and venv.num_envs == 2
        obs = venv.reset()
        assert obs.tolist() == [[0, 0], [0, 0]]
        obs, rew, dones, infos = venv.step(np.array([0, 1]))
        assert obs.tolist() == [[1, 1], [1, 2]] and not dones.any() and rew.dtype == np.float32
        assert "terminal_observation" not in infos[0]
        obs, rew, dones, infos = venv.step(np.array([1, 0]))
        assert dones.tolist() == [True, True] and rew.tolist() == [21, 20]
        assert obs.tolist() == [[0, 0], [0, 0]]                      # already the next episode
        assert infos[0]["terminal_observation"].tolist() == [2, 2]
        assert infos[1]["terminal_observation"].tolist() == [2, 1]
        assert infos[0]["TimeLimit.truncated"] is False
        assert venv.reset_infos[0] == {} and venv.get_attr("state")[0] == State.RUNNING
        obs, rew, dones, infos = venv.step(np.array([1, 1]))         # a normal step follows
        assert obs.tolist() == [[1, 2], [1, 2]] and rew.tolist() == [11, 11]
    finally:
        venv.close()


def test_sb3_vec_env_truncation_flag_and_vec_env_methods(countdown):
    from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv

    venv = DmRpcSB3VecEnv(3, countdown.address, world_settings={"length": 1, "ending": "truncate"})
    try:
        venv.reset()
        _, _, dones, infos = venv.step(np.array([0, 0, 0]))
        assert dones.all() and all(info["TimeLimit.truncated"] for info in infos)
        assert venv.get_attr("render_mode") == [None, None, None]
        venv.set_attr("note", 5, indices=[1])
        assert venv.get_attr("note", indices=1) == [5]
        assert venv.env_method("render", indices=[0, 2]) == [None, None]
        assert venv.env_is_wrapped(gym.Wrapper) == [False, False, False]
        assert venv.seed(10) == [10, 11, 12]
    finally:
        venv.close()


def test_sb3_seeds_reach_the_server_and_render_tiles_frames(catch_address):
    from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv

    venv = DmRpcSB3VecEnv(3, catch_address, seed_setting="seed", render_mode="rgb_array")
    envs = DmRpcVectorEnv(3, catch_address, seed_setting="seed")
    try:
        venv.seed(4)
        assert np.array_equal(venv.reset(), envs.reset(seed=4)[0])
        frames = venv.get_images()
        assert len(frames) == 3 and all(f.shape == (100, 100, 3) for f in frames)
        assert venv.render().shape == (200, 200, 3)           # SB3 tiles 3 frames in a 2x2 grid
    finally:
        venv.close()
        envs.close()


def test_ppo_trains_on_catch_through_the_sb3_vec_env(catch_address):
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor
    from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv

    venv = VecMonitor(DmRpcSB3VecEnv(4, catch_address, seed_setting="seed", flat_spaces=True))
    try:
        assert venv.observation_space == spaces.Box(0.0, 1.0, (100,), np.float32)
        assert venv.action_space == spaces.Discrete(3)
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
        model.learn(256)
        assert model.num_timesteps >= 256
        episodes = model.ep_info_buffer
        assert len(episodes) >= 20 and all(ep["l"] == 9 and ep["r"] in (-1.0, 1.0) for ep in episodes)
    finally:
        venv.close()
