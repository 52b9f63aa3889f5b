"""RLlib PPO (new API stack) trains one policy shared by the two agents of the Godot RL
Agents game Walkers, played by the real headless engine, a few iterations.

Walkers' action mixes a Box (``move``) and a Discrete (``run``), which the flat-spaces view RLlib trains on
cannot put in one array: :class:`OneBox` makes each agent's action one ``Box(-1, 1, (2,))`` (``run`` when the
second value is positive). Sampling runs in the driver (``num_env_runners=0``), where the game is started."""
from __future__ import annotations

import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from rllib_support import ROOT, require_ray

ray = require_ray()

from pettingzoo.utils.wrappers import BaseParallelWrapper  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.connectors.env_to_module import FlattenObservations  # noqa: E402
from ray.tune.registry import register_env  # noqa: E402

from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, GodotRLParallelEnv, GodotRLWarning  # noqa: E402
from dmrpc_gym.integrations.rllib.multiagent import DmRpcMultiAgentEnv  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "support"))
from godot_support import no_games_left, require_godot  # noqa: E402,F401

require_godot()
pytestmark = [pytest.mark.usefixtures("no_games_left"),
              pytest.mark.filterwarnings("ignore::dmrpc_gym.integrations.godot_rl.GodotRLWarning")]


class OneBox(BaseParallelWrapper):
    """Each agent's Dict action as one Box: ``[move, run]``, ``run`` when positive."""

    def action_space(self, agent: str) -> gym.spaces.Box:
        return gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def step(self, actions: dict):
        return self.env.step({agent: {"move": np.asarray(a[:1], np.float32), "run": int(a[1] > 0)}
                              for agent, a in actions.items()})


def walkers(env_config: dict) -> DmRpcMultiAgentEnv:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GodotRLWarning)
        return DmRpcMultiAgentEnv(OneBox(GodotRLParallelEnv(WALKERS_PROJECT, action_repeat=8)))


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    register_env("walkers", walkers)
    yield
    ray.shutdown()


def test_ppo_trains_on_the_two_agent_game():
    config = (
        PPOConfig()
        .environment("walkers")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1, env_to_module_connector=
                     lambda env, spaces=None, device=None: FlattenObservations(multi_agent=True))
        .multi_agent(policies={"walker"}, policy_mapping_fn=lambda agent_id, episode, **kwargs: "walker")
        .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=2)
        .rl_module(model_config={"fcnet_hiddens": [32]})
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    stats = results[-1]["learners"]["walker"]
    assert stats["num_module_steps_trained"] > 0 and np.isfinite(stats["policy_loss"]), stats
    sampled = results[-1]["env_runners"]["num_agent_steps_sampled_lifetime"]
    assert set(sampled) == {"walker_0", "walker_1"}, sampled
    print("episode return mean per iteration:", [r["env_runners"].get("episode_return_mean") for r in results])
