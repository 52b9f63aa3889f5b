"""Issue 14, client side: what a new user's mistakes and first steps meet (real servers on port 0)."""
from __future__ import annotations

import pickle
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo import ParallelEnv

import dmrpc_gym
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.integrations.flat_spaces import FlatSpaces
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch
from dmrpc_gym.worlds.tag import Tag

TAG_AGENTS = ["pursuer_0", "pursuer_1", "evader_0", "evader_1"]


@pytest.fixture(scope="module")
def catch():
    with Server(Catch) as server:
        yield server.address


@pytest.fixture(scope="module")
def tag():
    # A long server timeout: a lone agent that waited for it would show in the test's time.
    with Server(Tag, timeout=120.0) as server:
        yield server.address


# -- item 3: a single-agent client on a multi-agent world learns at once -----------------------

def test_single_agent_env_creating_a_multi_agent_world_is_refused_at_once(tag):
    start = time.monotonic()
    with pytest.raises(ValueError) as err:
        gym.make("dmrpc/Remote-v0", address=tag)
    assert time.monotonic() - start < 20            # not the server's 120 s wait
    text = str(err.value)
    assert "is a multi-agent world (agents 'pursuer_0', 'pursuer_1', 'evader_0', 'evader_1')" in text
    assert "joined alone as 'pursuer_0'" in text and "wait for 'pursuer_1', 'evader_0', 'evader_1'" in text
    assert f"dmrpc_gym.parallel_env('{tag}', agents={TAG_AGENTS!r})" in text
    with Connection(tag) as conn:                   # the refused env left and destroyed its world
        from dmrpc_gym.client.properties import Properties
        assert Properties(conn)["worlds"].tolist() == []


def test_vector_env_on_a_multi_agent_world_fails_at_once(tag):
    start = time.monotonic()
    with pytest.raises(ValueError, match="multi-agent world"):
        gym.make_vec("dmrpc/Remote-v0", num_envs=2, vectorization_mode="vector_entry_point", address=tag)
    assert time.monotonic() - start < 20


def test_joining_a_multi_agent_world_by_name_warns_which_agents_it_waits_for(tag):
    with Connection(tag) as conn:
        name = conn.send(pb.CreateWorldRequest()).world_name
        with pytest.warns(UserWarning, match=r"plays 'pursuer_0' and reset\(\) waits until 'pursuer_1', "
                                             r"'evader_0', 'evader_1' have joined too"):
            env = DmRpcEnv(tag, world_name=name)
        env.close()
        conn.send(pb.DestroyWorldRequest(world_name=name))


def test_the_multi_agent_world_lists_its_agents_and_the_missing_ones(tag):
    from dmrpc_gym.client.properties import Properties
    env = dmrpc_gym.parallel_env(tag, agents=TAG_AGENTS[:1] + TAG_AGENTS[1:])
    props = env.remote["evader_1"].connection
    values = Properties(props)
    assert values["agents"].tolist() == TAG_AGENTS and values["missing_agents"].tolist() == []
    env.close()


def test_single_agent_worlds_are_not_affected(catch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = DmRpcEnv(catch)
    env.reset(seed=0)
    env.close()


# -- item 4: render_mode="human" through gymnasium.make ------------------------------------------

class _MinimalServer:
    """A grpcio dm_env_rpc server as a minimal implementation would be: it ends the stream on any
    request it does not know (an extension included) and records every request kind it got."""

    def __init__(self):
        import concurrent.futures as cf

        import grpc
        from dmrpc_gym.protocol.wire import METHOD, SERVICE
        self.kinds: list[str] = []
        self.server = grpc.server(cf.ThreadPoolExecutor(4))
        handler = grpc.stream_stream_rpc_method_handler(
            self._process, pb.EnvironmentRequest.FromString, pb.EnvironmentResponse.SerializeToString)
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {METHOD: handler})])
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def _process(self, requests, context):
        spec = pb.TensorSpec(name="x", dtype=pb.FLOAT)
        for request in requests:
            kind = request.WhichOneof("payload")
            self.kinds.append(kind)
            response = pb.EnvironmentResponse()
            if kind == "create_world":
                response.create_world.world_name = "w"
            elif kind == "join_world":
                response.join_world.specs.observations[1].CopyFrom(spec)
            elif kind == "step":
                response.step.state = pb.RUNNING
                response.step.observations[1].floats.array.append(0.5)
            elif kind in ("leave_world", "destroy_world", "reset"):
                getattr(response, kind).SetInParent()
            else:
                raise RuntimeError(f"unknown request {kind}")      # the stream dies, as in such servers
            yield response


def test_the_lone_agent_check_asks_only_our_own_servers(catch):
    """Against a foreign server no extension request is sent (a minimal one would end the stream)."""
    server = _MinimalServer()
    try:
        env = dmrpc_gym.DmRpcEnv(server.address, world_settings={"size": 1})
        assert env.connection.server_software is None
        obs, _ = env.reset()
        assert float(obs) == 0.5
        env.close()
        assert "extension" not in server.kinds and server.kinds[:2] == ["create_world", "join_world"]
    finally:
        server.server.stop(None)
    ours = dmrpc_gym.DmRpcEnv(catch)
    assert ours.connection.server_software == f"dmrpc-gym/{dmrpc_gym.__version__}"
    ours.close()


def test_human_render_mode_shows_the_served_frames_in_a_window_of_the_client(monkeypatch):
    """``render_mode="human"`` (issue 42): the client asks the server for rgb_array frames and shows each
    in a pygame window of its own at the env's render_fps, as gymnasium's HumanRendering does; no
    wrapper is needed, so gymnasium.make says nothing."""
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    import pygame
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("dmrpc/Catch-v0", render_mode="human")
    try:
        assert env.render_mode == env.unwrapped.render_mode == "human"
        assert "HumanRendering" not in str(env) and env.metadata["render_fps"] == 10
        env.reset(seed=1)
        env.step(np.int8(1))
        assert env.render() is None
        want = env.unwrapped.agent.current_frame("rgb_array")
        shown = np.transpose(pygame.surfarray.array3d(pygame.display.get_surface()), (1, 0, 2))
        assert shown.shape == want.shape and (shown == want).all()
    finally:
        env.close()
    assert not pygame.display.get_init()


def test_an_unknown_render_mode_says_which_work(catch):
    with pytest.raises(ValueError, match=r"render_mode='ansi'; DmRpcEnv renders \['rgb_array', 'human'\]"):
        DmRpcEnv(catch, render_mode="ansi")


# -- item 7: mistakes are no longer accepted silently ---------------------------------------------

def test_reset_option_typo_is_refused_naming_the_known_options():
    env = gym.make("dmrpc/Catch-v0")
    with pytest.raises(ValueError, match=r"unknown reset option 'setting'; expected 'settings', 'world_settings'"):
        env.reset(options={"setting": {"seed": 1}})
    env.reset(options={"settings": {"seed": 1}})
    env.close()


def test_step_none_is_refused():
    env = gym.make("dmrpc/Catch-v0")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"step\(None\): expected an action of Discrete\(3, start=-1"):
        env.step(None)
    env.close()


def test_vector_env_step_before_reset_is_refused():
    envs = gym.make_vec("dmrpc/Catch-v0", num_envs=2, vectorization_mode="vector_entry_point")
    with pytest.raises(RuntimeError, match=r"step\(\) before reset\(\)"):
        envs.step(np.array([0, 0], np.int8))
    envs.reset(seed=0)
    envs.step(np.array([0, 0], np.int8))
    envs.close()


def test_render_without_render_mode_warns_as_gymnasium_does(catch):
    env = DmRpcEnv(catch)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="without specifying any render mode"):
        assert env.render() is None
    env.close()


def test_dict_action_on_a_single_action_space_names_the_mistake():
    env = gym.make("dmrpc/Catch-v0")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"got a dict action with keys \['paddle'\], but the action space is "
                                         r"Discrete\(3, start=-1, dtype=int8\), the single action 'paddle': "
                                         r"pass its value itself"):
        env.step({"paddle": 0})
    env.close()


# -- items 5 and 9: SB3 ---------------------------------------------------------------------------

def test_flat_spaces_pickles_with_plain_pickle():
    env = FlatSpaces(gym.make("dmrpc/Catch-v0"))
    copy = pickle.loads(pickle.dumps(env))
    try:
        obs, _ = copy.reset(seed=0)
        assert obs.shape == (100,) and copy.action_space == gym.spaces.Discrete(3)
        obs, reward, *_ = copy.step(1)
        assert isinstance(reward, float)
    finally:
        copy.close()
        env.close()


def test_sb3_vec_env_takes_a_bundled_world_and_reports_episodes_to_ppo():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv
    venv = DmRpcSB3VecEnv(2, "catch", seed_setting="seed", flat_spaces=True)
    try:
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
        model.learn(64)
        episodes = list(model.ep_info_buffer)
        # 64 timesteps over 2 envs are 32 steps each; Catch episodes are 9 steps and end with
        # +1 or -1, so each env finished 3.
        assert len(episodes) == 6
        assert all(e["l"] == 9 and e["r"] in (-1.0, 1.0) for e in episodes)
    finally:
        venv.close()


def test_tag_env_is_top_level():
    assert dmrpc_gym.tag_env is dmrpc_gym.worlds.embedded.tag_env


# -- item 10: pickling by constructor arguments (why not EzPickle: see client/lifecycle.py) --------

def test_an_unpickled_env_keeps_its_connection_after_garbage_collection(catch):
    import gc
    env = DmRpcEnv(catch, seed_setting="seed")
    copy = pickle.loads(pickle.dumps(env))
    env.close()
    gc.collect()                         # EzPickle's temporary twin would close the copy's connection here
    obs, _ = copy.reset(seed=3)
    obs, reward, *_ = copy.step(np.int8(0))
    assert obs.shape == (10, 10) and copy.world_name != env.world_name
    copy.close()


def test_an_env_made_with_a_channel_refuses_to_pickle(catch):
    import grpc
    channel = grpc.insecure_channel(catch)
    env = DmRpcEnv(channel=channel)
    with pytest.raises(TypeError, match="made with channel= cannot be pickled"):
        pickle.dumps(env)
    env.close()
    channel.close()


# -- item 9: packaging ------------------------------------------------------------------------------

def _setup_cfg():
    import configparser
    from pathlib import Path
    parser = configparser.ConfigParser()
    parser.read(Path(dmrpc_gym.__file__).resolve().parent.parent / "setup.cfg")
    return parser


def test_sb3_extra_declares_a_torch_floor_not_a_pin():
    sb3 = [line.strip() for line in _setup_cfg()["options.extras_require"]["sb3"].splitlines() if line.strip()]
    torch = [req for req in sb3 if req.startswith("torch")]
    assert torch == ["torch>=2.0"]


def test_readme_and_ci_install_the_cpu_torch_first():
    from pathlib import Path
    root = Path(dmrpc_gym.__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    command = readme.split("<!-- test-command -->\n```bash\n", 1)[1].split("\n", 1)[0]
    assert command.startswith("pip install torch==2.13.0 && "
                              'pip install -e ".[test]" && python -m pytest')
    assert "*torch==*pytest*" in (root / ".ci" / "run").read_text()


def test_inspect_needs_only_base_dependencies():
    requires = _setup_cfg()["options"]["install_requires"]
    assert "rich>=12" in requires


# -- frames (issue 21 item 5) -------------------------------------------------------------------

class Unrenderable(gym.Env):
    """Says it renders rgb_array but cannot: as CartPole does without pygame."""

    metadata = {"render_modes": ["rgb_array"]}
    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def render(self):
        raise gym.error.DependencyNotInstalled("drawing needs a library this machine lacks")


def test_no_frames_error_says_why_the_server_has_none():
    """The client's error quotes the server's reason (before: only the server's log said it)."""
    with Server(Unrenderable) as server:
        env = gym.make("dmrpc/Remote-v0", address=server.address, render_mode="rgb_array")
        try:                     # as locally, asking for the mode is no error: render() is
            env.reset(seed=0)
            with pytest.raises(dmrpc_gym.DmRpcError, match=r"render\(\) raised DependencyNotInstalled: drawing needs a library"):
                env.render()
        finally:
            env.close()


class PettingCanvas(ParallelEnv):
    """A PettingZoo env whose factory takes **kwargs, as PettingZoo's env() do."""

    metadata = {"name": "canvas_v0", "render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None):
        self.render_mode, self.possible_agents, self.agents = render_mode, ["a", "b"], []

    def observation_space(self, agent):
        return gym.spaces.Discrete(4)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t = ["a", "b"], 0
        return {a: 0 for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= 3
        obs = {a: self.t for a in self.agents}
        if done:
            self.agents = []
        return obs, {a: 1.0 for a in obs}, {a: done for a in obs}, {a: False for a in obs}, {a: {} for a in obs}

    def render(self):
        frame = np.zeros((6, 8, 3), np.uint8)
        frame[:, : self.t] = 255
        return frame


def canvas_env(**kwargs):
    return PettingCanvas(**kwargs)


def test_record_records_a_pettingzoo_env_built_through_kwargs(tmp_path):
    """A **kwargs factory gets render_mode (PettingZoo's env(render_mode=...)), so record works."""
    from dmrpc_gym.app.record import record
    with Server(canvas_env) as server:
        result = record(server.address, tmp_path / "canvas.gif", steps=5, progress=False)
    assert result["frames"] == 6 and (tmp_path / "canvas.gif").stat().st_size > 0


class Camera(gym.Env):
    """Its frames are an observation named ``camera``, not a render."""

    observation_space = gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (6, 8, 3), np.uint8),
                                         "x": gym.spaces.Discrete(9)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        frame = np.zeros((6, 8, 3), np.uint8)
        frame[:, : self.t] = 200
        return {"camera": frame, "x": self.t}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, self.t >= 8, False, {}


def test_record_takes_the_render_observation_its_error_recommends(tmp_path, capsys):
    from dmrpc_gym.app import cli
    with Server(Camera) as server:
        assert cli.main(["record", server.address, "--out", str(tmp_path / "a.gif"), "--steps", "3",
                         "--no-progress"]) == 1
        assert "--render-observation NAME" in capsys.readouterr().err
        assert cli.main(["record", server.address, "--out", str(tmp_path / "b.gif"), "--steps", "3",
                         "--no-progress", "--render-observation", "camera"]) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "b.gif").stat().st_size > 0


class Plain(gym.Env):
    """Takes no render_mode at all."""

    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 1, 0.0, True, False, {}


def plain_env(**kwargs):
    return Plain(**kwargs)


def test_a_kwargs_factory_whose_env_refuses_render_mode_is_served_without_frames(caplog):
    """The server tries render_mode once, builds without it, and says why there are no frames."""
    import logging
    with caplog.at_level(logging.WARNING, logger="dmrpc_gym.server"), Server(plain_env) as server:
        env = DmRpcEnv(server.address)
        try:
            assert env.reset(seed=0)[0] == 0 and env.step(1)[2] is True
        finally:
            env.close()
        env = DmRpcEnv(server.address, render_mode="rgb_array")
        try:
            env.reset(seed=0)
            with pytest.raises(ValueError, match=r"plain_env does not take render_mode"):
                env.render()
        finally:
            env.close()
    assert sum("building without render_mode" in r.getMessage() for r in caplog.records) == 1
