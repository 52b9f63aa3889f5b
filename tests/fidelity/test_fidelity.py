"""The differential fidelity suite (issue 29 item 5): a served env is the local env.

Every env below is served as a user serves it (``dmrpc-gym serve TARGET --port 0``, a
subprocess), read back through the public API (``gym.make("dmrpc/Remote-v0", ...)``,
``dmrpc_gym.parallel_env``, ``dmrpc_gym.aec_env``, ``dmrpc_gym.connect_dm_env``) and compared
with the same env built locally with the same arguments, check by check:

- ``spaces``: gymnasium spaces with ``==`` (per agent for PettingZoo), dm_env specs by class,
  name, shape, dtype, bounds and the bounds' shape;
- ``steps``: the same seed and the same actions (drawn from a seeded action space) give the same
  observations, rewards, flags / step types and discounts, ``info`` and agents, bit for bit, over
  two episode ends;
- ``frames``: built with ``render_mode="rgb_array"`` on both sides, the same steps give the same
  records and ``render()`` the same frames;
- ``second_world``: a second world of the same server (while a first one is open) gives the same run.

An env that cannot pass is marked xfail with its reason (``Case.xfail``); the table of envs
and their status is ``benchmarks/fidelity.md`` (``python benchmarks/fidelity_table.py --write``).
"""
from __future__ import annotations

import pytest

from fidelity_compare import first_lines, run_differences, spec_differences
from fidelity_support import PLAYERS, Case, DmFramesPlayer, Servers, close, local_env, remote_env, replay, script

GYM_STEPS = {"max_episode_steps": 8}
PZ_CYCLES = {"max_cycles": 6}


def _gym(family: str, ids: list[str], **extra) -> list[Case]:
    return [Case(family, env_id, env_id, "gym", GYM_STEPS, max_steps=40,
                 note="max_episode_steps=8", **extra) for env_id in ids]


def _parallel(family: str, modules: list[str], settings=PZ_CYCLES, note="max_cycles=6") -> list[Case]:
    return [Case(family, module.rsplit(".", 1)[-1], module, "parallel", settings, max_steps=40, note=note)
            for module in modules]


# dm_control: 5 control steps an episode (time_limit = 5 control timesteps of the domain).
_CONTROL_TIMESTEP = {"acrobot": 0.01, "ball_in_cup": 0.02, "cartpole": 0.01, "cheetah": 0.01, "finger": 0.02,
                     "fish": 0.04, "hopper": 0.02, "humanoid": 0.025, "manipulator": 0.01, "pendulum": 0.02,
                     "point_mass": 0.02, "reacher": 0.02, "swimmer": 0.03, "walker": 0.025}
_DM_CONTROL = [("acrobot", "swingup"), ("ball_in_cup", "catch"), ("cartpole", "balance"), ("cheetah", "run"),
               ("finger", "spin"), ("fish", "upright"), ("hopper", "stand"), ("humanoid", "stand"),
               ("manipulator", "bring_ball"), ("pendulum", "swingup"), ("point_mass", "easy"),
               ("reacher", "easy"), ("swimmer", "swimmer6"), ("walker", "stand")]

# bsuite: one id of each environment class (and of its reward-noise wrapper). An id whose sweep setting
# has seed=None is random each time it is built, so those worlds get seed=7 and the local env is
# built with seed=7 (``bsuite.load(experiment, {**sweep.SETTINGS[id], "seed": 7})``).
_BSUITE_SEEDED = {"bandit_noise", "cartpole", "cartpole_swingup", "catch", "deep_sea", "memory_len", "mountain_car",
                  "umbrella_length"}
_BSUITE = {"bandit/0": "", "bandit_noise/0": "the RewardNoise wrapper", "cartpole/0": "",
           "cartpole_swingup/0": "1000-step episodes", "catch/0": "", "deep_sea/0": "",
           "discounting_chain/0": "100-step episodes", "memory_len/0": "", "mountain_car/0": "1000-step episodes",
           "umbrella_length/0": ""}
_MNIST = "bsuite's MNIST downloads its data set when it is built; these machines have no network"

# Turn-based games: (settings, episodes); a random chess or go game lasts hundreds of moves, so
# those two play their first 30 moves and reach no episode end.
_CLASSIC_AEC = {"tictactoe_v3": ({}, 2), "connect_four_v3": ({}, 2), "chess_v6": ({}, 0),
                "go_v5": ({"board_size": 5}, 0), "leduc_holdem_v4": ({}, 2), "texas_holdem_v4": ({}, 2),
                "texas_holdem_no_limit_v6": ({}, 2), "hanabi_v5": ({}, 2)}

CASES: list[Case] = [
    *_gym("classic_control", ["CartPole-v0", "CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0",
                              "Pendulum-v1", "Acrobot-v1"]),
    *_gym("toy_text", ["Blackjack-v1", "FrozenLake-v1", "FrozenLake8x8-v1", "CliffWalking-v1",
                       "CliffWalkingSlippery-v1", "Taxi-v4"]),
    *_gym("mujoco", ["Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5",
                     "InvertedDoublePendulum-v5", "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5",
                     "Swimmer-v5", "Walker2d-v5"]),
    *_gym("box2d", ["LunarLander-v3", "LunarLanderContinuous-v3", "BipedalWalker-v3",
                    "BipedalWalkerHardcore-v3", "CarRacing-v3"]),
    *_parallel("butterfly", ["pettingzoo.butterfly.cooperative_pong_v6",
                             "pettingzoo.butterfly.knights_archers_zombies_v11",
                             "pettingzoo.butterfly.pistonball_v6"]),
    *_parallel("sisl", ["pettingzoo.sisl.multiwalker_v9", "pettingzoo.sisl.pursuit_v5"]),
    *_parallel("mpe2", [f"mpe2.{name}" for name in (
        "simple_v3", "simple_adversary_v3", "simple_crypto_v3", "simple_push_v3", "simple_reference_v3",
        "simple_speaker_listener_v4", "simple_spread_v3", "simple_tag_v3", "simple_world_comm_v3",
        "collect_treasure_v1", "simple_formation_v1", "simple_line_v1")]),
    *_parallel("classic", ["pettingzoo.classic.rps_v2"]),
    *[Case("dm_control", f"{domain}-{task}", f"dm_control/{domain}-{task}", "dm_env",
           {"random": 7, "time_limit": 5 * _CONTROL_TIMESTEP[domain]}, max_steps=20,
           note=f"time_limit={5 * _CONTROL_TIMESTEP[domain]:g} (5 steps)") for domain, task in _DM_CONTROL],
    *[Case("bsuite", bsuite_id, f"bsuite/{bsuite_id}", "dm_env",
           {"seed": 7} if bsuite_id.split("/")[0] in _BSUITE_SEEDED else {}, max_steps=2100, renders=False,
           note=", ".join(filter(None, ["seed=7" if bsuite_id.split("/")[0] in _BSUITE_SEEDED else "", note])))
      for bsuite_id, note in _BSUITE.items()],
    Case("bsuite", "mnist/0", "bsuite/mnist/0", "dm_env", renders=False, xfail={"*": _MNIST}),
]

# OpenSpiel's hanabi (through shimmy) draws a fresh seed at each unseeded reset: each of its games is seeded.
_RESEEDED = {"hanabi_v5"}
AEC_CASES = [Case("classic", name, f"pettingzoo.classic.{name}:env", "aec", settings, episodes=episodes,
                  max_steps=120 if episodes else 30, reseed=name in _RESEEDED,
                  note=("two games" + (", each seeded" if name in _RESEEDED else "")) if episodes
                  else "30 moves, no game end")
             for name, (settings, episodes) in _CLASSIC_AEC.items()]
CASES += AEC_CASES      # issue 29 item 4: turn-based games are served, read back by dmrpc_gym.aec_env


def _params() -> list:
    params = []
    for case in CASES:
        for check in case.checks():
            reason = case.why_not(check)
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            params.append(pytest.param(case, check, marks=marks, id=f"{case.id}-{check}"))
    return params


@pytest.fixture(scope="module")
def servers(request):
    order = [item.callspec.params["case"] for item in request.session.items
             if getattr(item, "module", None) is request.module and "case" in getattr(item, "callspec", {}).params
             and item.originalname == "test_served_env_is_the_local_env"]
    pool = Servers(order)
    yield pool
    pool.close()


#: The local run of each case (its operations and records), made once.
_LOCAL_RUNS: dict[str, object] = {}


def local_run(case: Case):
    if case.id not in _LOCAL_RUNS:
        env = local_env(case)
        try:
            _LOCAL_RUNS[case.id] = script(PLAYERS[case.kind], env, case)
        finally:
            close(env)
    return _LOCAL_RUNS[case.id]


def check_spaces(case: Case, address: str) -> list[str]:
    local, remote = local_env(case), None
    try:
        remote = remote_env(case, address)
        if case.kind == "dm_env":
            found: list[str] = []
            for what in ("observation_spec", "action_spec", "reward_spec", "discount_spec"):
                spec_differences(getattr(remote, what)(), getattr(local, what)(), what, found)
            return found
        pairs = []
        if case.kind == "gym":
            pairs = [("observation_space", remote.observation_space, local.observation_space),
                     ("action_space", remote.action_space, local.action_space)]
        else:
            if list(remote.possible_agents) != list(local.possible_agents):
                return [f"possible_agents: {remote.possible_agents} where the local env has {local.possible_agents}"]
            for agent in local.possible_agents:
                pairs += [(f"observation_space({agent!r})", remote.observation_space(agent), local.observation_space(agent)),
                          (f"action_space({agent!r})", remote.action_space(agent), local.action_space(agent))]
        return [f"{what}: {got} where the local env has {want}" for what, got, want in pairs if not got == want][:6]
    finally:
        close(remote, local)


def check_steps(case: Case, address: str) -> list[str]:
    run = local_run(case)
    assert run.ends >= case.episodes, (f"the case's settings give {run.ends} episode ends in "
                                       f"{case.max_steps} steps locally, not {case.episodes}")
    remote = remote_env(case, address)
    try:
        got = replay(PLAYERS[case.kind], remote, run.ops)
    finally:
        close(remote)
    return run_differences(got, run.records, run.ops)


def check_frames(case: Case, address: str) -> list[str]:
    ops = local_run(case).ops[:case.frame_ops]
    player = DmFramesPlayer if case.kind == "dm_env" else PLAYERS[case.kind]
    local = local_env(case, None if case.kind == "dm_env" else "rgb_array")
    remote = None
    try:
        want = replay(player, local, ops, render=True)
        assert all("error" not in w for w in want), want[-1]
        remote = remote_env(case, address, "rgb_array")
        got = replay(player, remote, ops, render=True)
    finally:
        close(remote, local)
    return run_differences(got, want, ops)


def check_second_world(case: Case, address: str) -> list[str]:
    run = local_run(case)
    first = second = None
    try:
        first = remote_env(case, address)
        PLAYERS[case.kind].reset(first, 0)
        second = remote_env(case, address)
        got = replay(PLAYERS[case.kind], second, run.ops)
    finally:
        close(second, first)
    return run_differences(got, run.records, run.ops)


CHECKS = {"spaces": check_spaces, "steps": check_steps, "frames": check_frames, "second_world": check_second_world}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case, check", _params())
def test_served_env_is_the_local_env(case: Case, check: str, servers: Servers):
    served = servers.get(case)
    try:
        found = CHECKS[check](case, served.address)
    except Exception as exc:
        if served.alive():
            raise
        raise AssertionError(f"the server exited ({type(exc).__name__}: {exc}); its last lines:\n"
                             f"{served.tail()}") from exc
    if found:
        if not served.alive():
            found.append(f"the server exited; its last lines:\n{served.tail()}")
        pytest.fail(first_lines(found, f"{case.target} served differs from the local env ({check})"), pytrace=False)

