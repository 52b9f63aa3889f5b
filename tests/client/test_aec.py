"""Turn-based PettingZoo games (AEC envs that are not parallelizable), served turn by turn and
read back by ``dmrpc_gym.aec_env``: the served game is the local game, step for step."""
from __future__ import annotations

import concurrent.futures
import contextlib
import time
from typing import Any, Iterator

import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb

pytest.importorskip("pygame", reason="PettingZoo's classic games import pygame")
from pettingzoo.classic import connect_four_v3, tictactoe_v3  # noqa: E402
from pettingzoo.test import api_test  # noqa: E402

import dmrpc_gym  # noqa: E402
from dmrpc_gym.server import Server  # noqa: E402
from dmrpc_gym.server.envs.factories import Factory  # noqa: E402
from processes import ServedProcess  # noqa: E402
from servers import OfficialClient, tensor, uids, unpack  # noqa: E402

TICTACTOE = "pettingzoo.classic.tictactoe_v3:env"
CONNECT_FOUR = "pettingzoo.classic.connect_four_v3:env"
LEDUC = "pettingzoo.classic.leduc_holdem_v4"       # the module form: its env() (a card game, rlcard's)


def _leduc() -> Any:
    from pettingzoo.classic import leduc_holdem_v4
    return leduc_holdem_v4.env()


LOCAL = {TICTACTOE: tictactoe_v3.env, CONNECT_FOUR: connect_four_v3.env, LEDUC: _leduc}


@contextlib.contextmanager
def served(target: str, how: str) -> Iterator[str]:
    """The address of ``target`` served by the real CLI (``dmrpc-gym serve TARGET --port 0``) or by
    an in-process ``Server``."""
    if how == "cli":
        process = ServedProcess(0, target)
        try:
            yield process.address
        finally:
            process.close()
    else:
        with Server(target) as server:
            yield server.address


@contextlib.contextmanager
def both(target: str, how: str = "server", **kwargs: Any) -> Iterator[tuple[Any, Any]]:
    """``(local env, served env read back by aec_env)`` of ``target``, closed after."""
    with served(target, how) as address:
        remote = dmrpc_gym.aec_env(address=address, **kwargs)
        local = LOCAL[target]()
        try:
            yield local, remote
        finally:
            remote.close()
            local.close()


# -- state as a PettingZoo user sees it -----------------------------------------------------

def same(a: Any, b: Any, where: str = "") -> None:
    """``a`` and ``b`` are equal value for value, type for type, dtype for dtype."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (where, a, b)
        for key in a:
            same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), (where, a, b)
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


def seen(env: Any) -> dict[str, Any]:
    """What a user reads of an AEC env between steps."""
    state = {"agent_selection": env.agent_selection, "agents": list(env.agents),
             "rewards": dict(env.rewards), "cumulative": dict(env._cumulative_rewards),
             "terminations": dict(env.terminations), "truncations": dict(env.truncations),
             "infos": dict(env.infos)}
    if env.agents:
        state["last"] = dict(zip(("observation", "reward", "terminated", "truncated", "info"), env.last()))
        state["observe"] = {agent: env.observe(agent) for agent in env.agents}
    return state


def play_both(local: Any, remote: Any, seed: int, illegal_at: int | None = None) -> int:
    """One game on both envs with the same seed and moves (legal ones drawn from the mask by a
    seeded RNG; at move ``illegal_at``, an illegal one), compared after every step. Its length."""
    rng = np.random.default_rng(seed)
    local.reset(seed=seed)
    remote.reset(seed=seed)
    moves = 0
    while True:
        same(seen(local), seen(remote), f"seed {seed}, move {moves}")
        if not local.agents:
            return moves
        observation, _, terminated, truncated, _ = local.last()
        mask = observation["action_mask"]
        if terminated or truncated:
            action = None
        elif moves == illegal_at:
            action = int(np.flatnonzero(mask == 0)[0])
        else:
            action = int(rng.choice(np.flatnonzero(mask)))
        local.step(action)
        remote.step(action)
        moves += 1


# -- tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["cli", "server"])
def test_api_test_passes_on_served_tictactoe(how):
    with served(TICTACTOE, how) as address:
        env = dmrpc_gym.aec_env(address=address)
        try:
            api_test(env, num_cycles=100)
            assert isinstance(env, dmrpc_gym.DmRpcAECEnv)
        finally:
            env.close()


@pytest.mark.parametrize("target,how", [(TICTACTOE, "cli"), (TICTACTOE, "server"), (CONNECT_FOUR, "server"),
                                         (LEDUC, "server")])
def test_the_served_game_is_the_local_game_step_for_step(target, how):
    if target == LEDUC:
        pytest.importorskip("rlcard", reason="PettingZoo's card games need rlcard (pettingzoo[classic])")
    with both(target, how, world_settings={}) as (local, remote):
        assert remote.possible_agents == local.possible_agents
        for agent in local.possible_agents:
            assert remote.action_space(agent) == local.action_space(agent)
            assert remote.observation_space(agent)["action_mask"] == local.observation_space(agent)["action_mask"]
        lengths = [play_both(local, remote, seed) for seed in (0, 1, 2)]
        assert min(lengths) >= 3, lengths            # whole games: moves, then every agent's dead step


def test_an_illegal_move_ends_the_game_as_locally():
    """PettingZoo's TerminateIllegalWrapper: the mover loses (-1), the game is over for both."""
    with both(TICTACTOE) as (local, remote):
        assert play_both(local, remote, 3, illegal_at=2) == 5    # 2 moves, the illegal one, 2 dead steps
        assert remote.rewards == {} and local.rewards == {}
        assert play_both(local, remote, 4, illegal_at=3) == 6
        assert play_both(local, remote, 5) >= 5                  # and the next game is a game again


def test_a_reset_mid_game_starts_a_fresh_game():
    with both(CONNECT_FOUR) as (local, remote):
        for env in (local, remote):
            env.reset(seed=7)
            for _ in range(3):
                env.step(1)
        play_both(local, remote, 8)


def _official_player(address: str, world: str, name: str, moves: list, log: list) -> dpb.StepResponse:
    """A foreign dm_env_rpc client playing ``name`` on a connection of its own: each step is
    answered at its turn; it moves the first free cell of the mask until its sequence ends."""
    client = OfficialClient(address)
    try:
        specs = client.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": tensor(name)})).specs
        action_uid = uids(specs)[0]["action"]
        obs_uids = uids(specs)[1]
        wanted = [obs_uids["action_mask"], obs_uids["reward"]]
        response = client.send(dpb.StepRequest(requested_observations=wanted))
        log.append((name, "first", time.monotonic()))
        while response.state == dpb.RUNNING:
            move = int(np.flatnonzero(unpack(response.observations[obs_uids["action_mask"]]))[0])
            moves.append((name, move))
            response = client.send(dpb.StepRequest(actions={action_uid: tensor(move, np.int64)},
                                                   requested_observations=wanted))
        log.append((name, dpb.EnvironmentStateType.Name(response.state),
                    float(unpack(response.observations[obs_uids["reward"]]))))
        client.send(dpb.LeaveWorldRequest())
        return response
    finally:
        client.close()


def test_a_foreign_client_plays_turn_by_turn_and_waits_out_of_turn():
    """Two official dm_env_rpc connections: the second player's first step waits until the first
    player has moved; they play the game the local env plays with those moves."""
    with served(TICTACTOE, "server") as address:
        opener = OfficialClient(address)
        try:
            world = opener.send(dpb.CreateWorldRequest(settings={"seed": tensor(0)})).world_name
            moves: list = []
            log: list = []
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                second = pool.submit(_official_player, address, world, "player_2", moves, log)
                time.sleep(0.5)
                assert not second.done() and log == []      # not its turn: it waits
                first = pool.submit(_official_player, address, world, "player_1", moves, log)
                first.result(30), second.result(30)
            opener.send(dpb.DestroyWorldRequest(world_name=world))
        finally:
            opener.close()
    assert [entry[:2] for entry in log[:2]] == [("player_1", "first"), ("player_2", "first")]
    local = tictactoe_v3.env()
    local.reset(seed=0)
    for name, move in moves:
        assert local.agent_selection == name
        local.step(move)
    ends = {entry[0]: entry[1:] for entry in log[2:]}
    for name in local.possible_agents:      # each saw its own end, with the reward the game gave it
        assert ends[name] == ("TERMINATED", float(local._cumulative_rewards[name])), (ends, local.rewards)


def test_an_agent_out_of_turn_waits_for_its_turn_then_is_answered():
    """The in-process view: player_2's step is held while player_1 thinks, and answered the moment
    player_1 has moved."""
    with served(TICTACTOE, "server") as address:
        env = dmrpc_gym.aec_env(address)
        try:
            env.reset(seed=0)
            assert env.agent_selection == "player_1"
            pending = env._pending
            assert pending == ["player_2"]                 # its first step is in flight, unanswered
            time.sleep(0.3)
            assert not env._seats.connections["player_2"].answer_ready()
            env.step(0)
            assert env.agent_selection == "player_2" and env._pending == ["player_1"]
        finally:
            env.close()


def test_turn_based_aec_envs_no_longer_crash_serve():
    """Defect 6 of issue 29: ``serve pettingzoo.classic.tictactoe_v3:env`` raised AttributeError
    ('Factory' object has no attribute 'kind') while resolving the target."""
    factory = Factory(TICTACTOE)
    env, kind = factory.make({})
    try:
        assert (factory.kind, kind) == (None, "aec")
    finally:
        env.close()
    assert Factory("pettingzoo.butterfly.pistonball_v6:env").kind is None    # resolved (it crashed too)


def test_aec_env_refuses_a_world_that_is_not_turn_based():
    from dmrpc_gym.worlds.tag import Tag
    with Server(Tag) as server:
        with pytest.raises(ValueError, match="not a turn-based world"):
            dmrpc_gym.aec_env(server.address)


def test_close_mid_game_leaves_the_server_clean():
    with served(TICTACTOE, "server") as address:
        env = dmrpc_gym.aec_env(address)
        env.reset(seed=0)
        env.step(4)
        started = time.monotonic()
        env.close()
        env.close()
        assert time.monotonic() - started < 1.5
        again = dmrpc_gym.aec_env(address)       # a fresh world plays at once
        try:
            again.reset(seed=0)
            again.step(4)
            assert again.agent_selection == "player_2"
        finally:
            again.close()


def test_serve_prints_the_aec_env_line_and_processes_refuse_turns():
    from dmrpc_gym.app.serve_command import connect_line
    from dmrpc_gym.protocol.errors import DmRpcError
    from servers import serve_like_cli
    with serve_like_cli(TICTACTOE) as server:
        assert connect_line(server).endswith(
            f'env = dmrpc_gym.aec_env("{server.address}", agents=["player_1", "player_2"])')
    with Server(TICTACTOE, processes=1) as server:
        with pytest.raises(DmRpcError, match="turn-based PettingZoo AEC games.*without processes="):
            dmrpc_gym.aec_env(server.address)


def test_a_step_that_timed_out_waiting_moves_nothing_when_sent_again():
    """A waiting step ends with DEADLINE_EXCEEDED after the server's timeout with no move; the
    agent's next step waits for its turn again, and its action is not taken as a move."""
    with Server(TICTACTOE, timeout=0.5) as server:
        one, two = OfficialClient(server.address), OfficialClient(server.address)
        try:
            world = one.send(dpb.CreateWorldRequest(settings={"seed": tensor(0)})).world_name
            specs = one.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": tensor("player_1")})).specs
            two.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": tensor("player_2")}))
            action, observation = uids(specs)[0]["action"], uids(specs)[1]
            one.send(dpb.StepRequest())                              # player_1's first turn
            with pytest.raises(Exception, match=r"waited 0.5 s for agent .*player_1.* to move"):
                two.send(dpb.StepRequest())                          # nobody moves within the timeout
            mask = [observation["action_mask"]]
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                retry = pool.submit(two.send, dpb.StepRequest(actions={action: tensor(0, np.int64)},
                                                              requested_observations=mask))
                time.sleep(0.2)
                assert not retry.done()
                moved = pool.submit(one.send, dpb.StepRequest(actions={action: tensor(4, np.int64)}))
                seen_by_two = unpack(retry.result(10).observations[observation["action_mask"]])
                assert seen_by_two.tolist() == [1, 1, 1, 1, 0, 1, 1, 1, 1]     # only player_1's move
                moving = pool.submit(two.send, dpb.StepRequest(actions={action: tensor(0, np.int64)}))
                assert moved.result(10).state == dpb.RUNNING         # player_1's turn again
                one.send(dpb.ResetRequest())                         # ends the game for both
                assert moving.result(10).state == dpb.INTERRUPTED
        finally:
            one.close()
            two.close()


def test_render_is_the_local_frame():
    with both(TICTACTOE, render_mode="rgb_array") as (_, remote):
        local = tictactoe_v3.env(render_mode="rgb_array")
        try:
            for env in (local, remote):
                env.reset(seed=0)
                env.step(4)
                env.step(0)
            frame = remote.render()
            assert frame.dtype == np.uint8 and np.array_equal(frame, local.render())
        finally:
            local.close()


def test_a_lone_gymnasium_env_on_a_turn_based_world_is_pointed_to_aec_env():
    with Server(tictactoe_v3.env) as server:
        with pytest.raises(ValueError, match=r"dmrpc_gym\.aec_env\("):
            dmrpc_gym.DmRpcEnv(server.address, world_settings={})
