"""The gymnasium side of dmrpc_gym.server, over real gRPC with official and raw clients."""
from __future__ import annotations

import time

import grpc
import gymnasium as gym
import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_adaptor
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb
from dm_env_rpc.v1 import error as dm_error
from dm_env_rpc.v1.extensions import properties as dm_properties

import servers
from dmrpc_gym.protocol import tensors
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.server import Server, serve
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.worlds.catch import Catch

INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, FAILED_PRECONDITION = 3, 5, 7, 9
UNIMPLEMENTED, INTERNAL = 12, 13


@pytest.fixture(scope="module")
def catch_server():
    server = servers.start(Catch)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cartpole_server():
    server = servers.serve_like_cli("CartPole-v1")
    yield server
    server.stop()


def _step_request(**kwargs):
    return dpb.StepRequest(**kwargs)


def _code(excinfo) -> int:
    return excinfo.value.code


def _catch_policy(board: np.ndarray) -> np.int8:
    """Move the paddle under the ball."""
    ball = np.argwhere(board[:-1] > 0)
    paddle = int(np.argmax(board[-1]))
    if not len(ball):
        return np.int8(0)
    return np.int8(np.sign(int(ball[0][1]) - paddle))


# -- whole episodes with the official DmEnvAdaptor -----------------------------------------------

def test_dm_env_adaptor_plays_catch_episodes(catch_server):
    with servers.official(catch_server.address) as conn:
        env, world = dm_env_adaptor.create_and_join_world(
            conn, {"seed": 5}, {}, requested_observations=["board"])
        try:
            assert set(env.observation_spec()) == {"board"}
            spec = env.action_spec()["paddle"]
            assert (spec.dtype, spec.shape, spec.minimum, spec.maximum) == (np.int8, (), -1, 1)
            for _ in range(3):
                timestep = env.reset()
                assert timestep.first() and timestep.observation["board"].shape == (10, 10)
                steps, total = 0, 0.0
                while not timestep.last():
                    timestep = env.step({"paddle": _catch_policy(timestep.observation["board"])})
                    steps += 1
                    total += timestep.reward
                assert (steps, total, timestep.discount) == (9, 1.0, 0.0)
            # Standing still misses some of the balls: their episodes return -1.
            returns = []
            for _ in range(10):
                timestep = env.reset()
                while not timestep.last():
                    timestep = env.step({"paddle": np.int8(0)})
                returns.append(timestep.reward)
            assert set(returns) <= {1.0, -1.0} and -1.0 in returns
        finally:
            env.close()
            conn.send(dpb.DestroyWorldRequest(world_name=world))


def test_dm_env_adaptor_plays_cartpole_episodes(cartpole_server):
    with servers.official(cartpole_server.address) as conn:
        env, world = dm_env_adaptor.create_and_join_world(conn, {"seed": 0, "max_episode_steps": 15}, {})
        try:
            assert env.observation_spec()["observation"].shape == (4,)
            assert env.action_spec()["action"].maximum == 1
            lengths = []
            for episode in range(4):
                timestep = env.reset()
                steps, total = 0, 0.0
                while not timestep.last():
                    # Alternating pushes keep the pole up until the time limit.
                    timestep = env.step({"action": np.int64(steps % 2 if episode % 2 else 0)})
                    steps += 1
                    total += timestep.reward
                assert total == steps
                lengths.append((steps, timestep.discount))
            # Pushing left always: the pole falls (terminated, discount 0) before the limit;
            # alternating: truncated at max_episode_steps (INTERRUPTED, discount 1).
            assert lengths[0][0] < 15 and lengths[0][1] == 0.0
            assert lengths[1] == (15, 1.0)
        finally:
            env.close()
            conn.send(dpb.DestroyWorldRequest(world_name=world))


# -- bad requests leave the server serving ---------------------------------------------------------

def _second_client_steps(address: str) -> None:
    """Proof that the server still serves: another client joins and steps."""
    with servers.official(address) as conn:
        conn.send(dpb.JoinWorldRequest(world_name=""))
        assert conn.send(_step_request()).state == dpb.RUNNING
        assert conn.send(_step_request(actions={1: servers.tensor(np.int8(1))})).state == dpb.RUNNING
        conn.send(dpb.LeaveWorldRequest())


def test_malformed_bytes_get_an_error_and_the_stream_stays_open(catch_server):
    with servers.RawStream(catch_server.address) as stream:
        answer = stream.send_bytes(b"\xff\xff\xff garbage")
        assert answer.WhichOneof("payload") == "error"
        assert answer.error.code == INVALID_ARGUMENT and "EnvironmentRequest" in answer.error.message
        # Unknown payload (a field number dm_env_rpc reserves) and an empty request.
        answer = stream.send_bytes(b"\x42\x00")
        assert answer.error.code == UNIMPLEMENTED
        assert stream.send_bytes(b"").error.code == INVALID_ARGUMENT
        # Same stream, still usable.
        answer = stream.send(create_world=pb.CreateWorldRequest())
        world = answer.create_world.world_name
        assert world
        assert stream.send(join_world=pb.JoinWorldRequest(world_name=world)).WhichOneof("payload") == "join_world"
        assert stream.send(step=pb.StepRequest()).step.state == pb.RUNNING
        stream.send(leave_world=pb.LeaveWorldRequest())
        stream.send(destroy_world=pb.DestroyWorldRequest(world_name=world))
    _second_client_steps(catch_server.address)


def test_requests_before_join_are_refused(catch_server):
    with servers.official(catch_server.address) as conn:
        for request in (_step_request(), dpb.ResetRequest()):
            with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
                conn.send(request)
            assert _code(excinfo) == FAILED_PRECONDITION and "JoinWorld" in excinfo.value.message
        conn.send(dpb.LeaveWorldRequest())  # not joined: a no-op
        conn.send(dpb.JoinWorldRequest(world_name=""))
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.JoinWorldRequest(world_name=""))
        assert _code(excinfo) == FAILED_PRECONDITION and "already joined" in excinfo.value.message
        assert conn.send(_step_request()).state == dpb.RUNNING
        conn.send(dpb.LeaveWorldRequest())
    _second_client_steps(catch_server.address)


@pytest.mark.parametrize("action, expected", [
    (servers.tensor(np.float64(1.0)), "action 'paddle': expected a INT8 tensor (int8), got a DOUBLE tensor"),
    (servers.tensor(np.int8(2)), "action 'paddle': value 2 is above the maximum 1"),
    (servers.tensor(np.int8(-5)), "action 'paddle': value -5 is below the minimum -1"),
    (servers.tensor(np.array([1], np.int8)), "action 'paddle': expected shape (), got (1,)"),
])
def test_bad_actions_are_refused_with_their_name(catch_server, action, expected):
    with servers.official(catch_server.address) as conn:
        conn.send(dpb.JoinWorldRequest(world_name=""))
        conn.send(_step_request())
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(_step_request(actions={1: action}))
        assert _code(excinfo) == INVALID_ARGUMENT
        assert excinfo.value.message == expected
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(_step_request(actions={7: servers.tensor(np.int8(0))}))
        assert "no action has UID 7 (actions: 1='paddle')" in excinfo.value.message
        # The failed steps changed nothing: the episode goes on.
        states = [conn.send(_step_request(actions={1: servers.tensor(np.int8(0))})).state for _ in range(9)]
        assert states == [dpb.RUNNING] * 8 + [dpb.TERMINATED]
        conn.send(dpb.LeaveWorldRequest())
    _second_client_steps(catch_server.address)


def test_a_cancelled_stream_leaves_its_world(catch_server):
    with servers.official(catch_server.address) as conn:
        world = conn.send(dpb.CreateWorldRequest()).world_name
        stream = servers.RawStream(catch_server.address)
        stream.send(join_world=pb.JoinWorldRequest(world_name=world))
        stream.send(step=pb.StepRequest())
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.DestroyWorldRequest(world_name=world))
        assert _code(excinfo) == FAILED_PRECONDITION and "1 agent(s) are joined" in excinfo.value.message
        stream.cancel()
        stream.close()
        deadline = time.monotonic() + 10
        while True:  # the server notices the cancellation asynchronously
            try:
                conn.send(dpb.DestroyWorldRequest(world_name=world))
                break
            except dm_error.DmEnvRpcError:
                assert time.monotonic() < deadline, "the cancelled stream never left its world"
                time.sleep(0.02)
    _second_client_steps(catch_server.address)


# -- observations ---------------------------------------------------------------------------------

class CountingCatch(Catch):
    renders = 0

    def render(self):
        CountingCatch.renders += 1
        return super().render()


def test_only_requested_observations_are_sent_and_rgb_rendered_on_request():
    with servers.start(CountingCatch) as server, servers.official(server.address) as conn:
        specs = conn.send(dpb.JoinWorldRequest(world_name="")).specs
        _, obs = servers.uids(specs)
        assert list(obs) == ["board", "reward", "discount", "RGB"]
        rgb = specs.observations[obs["RGB"]]
        assert (rgb.dtype, list(rgb.shape)) == (dpb.UINT8, [100, 100, 3])
        before = CountingCatch.renders
        response = conn.send(_step_request(requested_observations=[obs["board"]]))
        assert list(response.observations) == [obs["board"]]
        for _ in range(3):
            response = conn.send(_step_request(requested_observations=[obs["reward"], obs["discount"]]))
        assert sorted(response.observations) == [obs["reward"], obs["discount"]]
        assert CountingCatch.renders == before
        response = conn.send(_step_request(requested_observations=[obs["RGB"], obs["board"], obs["RGB"]]))
        assert CountingCatch.renders == before + 1
        frame = servers.unpack(response.observations[obs["RGB"]])
        board = servers.unpack(response.observations[obs["board"]])
        assert frame.shape == (100, 100, 3) and frame.dtype == np.uint8
        # The frame shows the board: 10x10 pixels per cell, background where the board is 0.
        cells = frame[5::10, 5::10]
        background = cells[tuple(np.argwhere(board == 0)[0])]
        assert np.array_equal((cells != background).any(axis=2), board > 0)


def test_no_rgb_without_rgb_array_rendering():
    with servers.start(Catch, render=False) as server, servers.official(server.address) as conn:
        specs = conn.send(dpb.JoinWorldRequest(world_name="")).specs
        assert [s.name for s in specs.observations.values()] == ["board", "reward", "discount"]


def test_rewards_and_discounts_follow_the_episode(catch_server):
    with servers.official(catch_server.address) as conn:
        world = conn.send(dpb.CreateWorldRequest(settings={"seed": servers.tensor(2)})).world_name
        _, obs = servers.uids(conn.send(dpb.JoinWorldRequest(world_name=world)).specs)
        wanted = [obs["reward"], obs["discount"], obs["board"]]
        first = conn.send(_step_request(requested_observations=wanted))
        values = lambda r: (servers.unpack(r.observations[obs["reward"]]).item(),  # noqa: E731
                            servers.unpack(r.observations[obs["discount"]]).item())
        assert first.state == dpb.RUNNING and values(first) == (0.0, 1.0)
        board = servers.unpack(first.observations[obs["board"]])
        ball_column = int(np.argmax(board[0]))
        paddle = 5
        for step in range(9):
            move = np.int8(np.sign(ball_column - paddle))
            paddle += int(move)
            response = conn.send(_step_request(actions={1: servers.tensor(move)}, requested_observations=wanted))
        assert response.state == dpb.TERMINATED and values(response) == (1.0, 0.0)
        # The step after the end starts a new sequence, ignoring its (invalid) actions.
        response = conn.send(_step_request(actions={99: servers.tensor(1.5)}, requested_observations=wanted))
        assert response.state == dpb.RUNNING and values(response) == (0.0, 1.0)
        conn.send(dpb.LeaveWorldRequest())
        conn.send(dpb.DestroyWorldRequest(world_name=world))


# -- settings, seeds and resets ----------------------------------------------------------------------

def _first_board(conn, world, **join):
    conn.send(dpb.JoinWorldRequest(world_name=world, settings={k: servers.tensor(v) for k, v in join.items()}))
    board = servers.unpack(conn.send(_step_request(requested_observations=[1])).observations[1])
    conn.send(dpb.LeaveWorldRequest())
    return board


def test_world_settings_become_factory_kwargs(catch_server):
    with servers.official(catch_server.address) as conn:
        world = conn.send(dpb.CreateWorldRequest(
            settings={"rows": servers.tensor(np.int32(5)), "columns": servers.tensor(4)})).world_name
        specs = conn.send(dpb.JoinWorldRequest(world_name=world)).specs
        assert list(specs.observations[1].shape) == [5, 4]
        assert list(specs.observations[4].shape) == [50, 40, 3]
        conn.send(dpb.LeaveWorldRequest())
        conn.send(dpb.DestroyWorldRequest(world_name=world))
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.CreateWorldRequest(settings={"speed": servers.tensor(3)}))
        assert excinfo.value.message == ("unknown world setting 'speed' for dmrpc_gym.worlds.catch:Catch "
                                         "(accepted: columns, rows, seed)")
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.CreateWorldRequest(settings={"rows": servers.tensor(1)}))
        assert _code(excinfo) == INVALID_ARGUMENT and "at least 2 rows" in excinfo.value.message


def test_seeds_make_worlds_deterministic_and_agents_distinct(catch_server):
    with servers.official(catch_server.address) as conn:
        boards = {}
        for label, seed in (("a", 21), ("b", 21), ("c", 22)):
            world = conn.send(dpb.CreateWorldRequest(settings={"seed": servers.tensor(seed)})).world_name
            boards[label] = _first_board(conn, world)
            # The second agent of a world starts from seed + 1.
            with servers.official(catch_server.address) as other:
                other.send(dpb.JoinWorldRequest(world_name=world))
                conn.send(dpb.JoinWorldRequest(world_name=world))
                boards[label + "1"] = servers.unpack(
                    conn.send(_step_request(requested_observations=[1])).observations[1])
                conn.send(dpb.LeaveWorldRequest())
            conn.send(dpb.DestroyWorldRequest(world_name=world))
        assert np.array_equal(boards["a"], boards["b"])
        assert np.array_equal(boards["a1"], boards["c"])
        # A join setting seeds that agent.
        world = conn.send(dpb.CreateWorldRequest()).world_name
        assert np.array_equal(_first_board(conn, world, seed=22), boards["c"])
        conn.send(dpb.DestroyWorldRequest(world_name=world))


def _ball_columns(conn, episodes):
    columns = []
    for _ in range(episodes):
        response = conn.send(_step_request(requested_observations=[1]))
        assert response.state == dpb.RUNNING
        columns.append(int(np.argmax(servers.unpack(response.observations[1])[0])))
        conn.send(dpb.ResetRequest())
    return columns


def test_reset_starts_a_new_sequence_with_its_seed(catch_server):
    with servers.official(catch_server.address) as conn:
        world = conn.send(dpb.CreateWorldRequest(settings={"seed": servers.tensor(1)})).world_name
        specs = conn.send(dpb.JoinWorldRequest(world_name=world)).specs
        first = _ball_columns(conn, 8)
        assert len(set(first)) > 1  # one seed, a stream of different episodes
        props = dm_properties.PropertiesExtension(conn)
        conn.send(_step_request())
        conn.send(_step_request(actions={1: servers.tensor(np.int8(1))}))
        assert props["episode_step"] == 1
        assert conn.send(dpb.ResetRequest(settings={"seed": servers.tensor(1)})).specs == specs
        # From RUNNING, Reset makes the next step start a new sequence (actions ignored).
        response = conn.send(_step_request(actions={1: servers.tensor(np.int8(9))}, requested_observations=[1]))
        assert response.state == dpb.RUNNING and props["episode_step"] == 0
        assert int(np.argmax(servers.unpack(response.observations[1])[0])) == first[0]
        conn.send(dpb.ResetRequest(settings={"seed": servers.tensor(1)}))
        assert _ball_columns(conn, 8) == first
        # Reset settings may also override the world's settings for this agent.
        specs = conn.send(dpb.ResetRequest(settings={"rows": servers.tensor(4)})).specs
        assert list(specs.observations[1].shape) == [4, 10]
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.ResetRequest(settings={"speed": servers.tensor(4)}))
        assert _code(excinfo) == INVALID_ARGUMENT
        conn.send(dpb.LeaveWorldRequest())
        conn.send(dpb.DestroyWorldRequest(world_name=world))


def test_reset_world_interrupts_other_agents_and_applies_settings(catch_server):
    with servers.official(catch_server.address) as host, servers.official(catch_server.address) as player:
        world = host.send(dpb.CreateWorldRequest(settings={"seed": servers.tensor(3)})).world_name
        player.send(dpb.JoinWorldRequest(world_name=world))
        player.send(_step_request())
        player.send(_step_request(actions={1: servers.tensor(np.int8(1))}))
        host.send(dpb.ResetWorldRequest(world_name=world, settings={"seed": servers.tensor(8)}))
        assert player.send(_step_request(requested_observations=[1])).state == dpb.INTERRUPTED
        board = servers.unpack(player.send(_step_request(requested_observations=[1])).observations[1])
        expected = _first_board(host, world, seed=8)
        assert np.array_equal(board, expected)
        # Settings that change the specs: the agent must Reset (or rejoin) to get the new ones.
        host.send(dpb.ResetWorldRequest(world_name=world, settings={"columns": servers.tensor(6)}))
        assert player.send(_step_request()).state == dpb.INTERRUPTED
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            player.send(_step_request())
        assert _code(excinfo) == FAILED_PRECONDITION and "ResetRequest" in excinfo.value.message
        specs = player.send(dpb.ResetRequest()).specs
        assert list(specs.observations[1].shape) == [10, 6]
        assert player.send(_step_request()).state == dpb.RUNNING
        # The caller's own agent starts over without an INTERRUPTED step.
        player.send(dpb.ResetWorldRequest(world_name=world))
        assert player.send(_step_request()).state == dpb.RUNNING
        player.send(dpb.LeaveWorldRequest())
        host.send(dpb.DestroyWorldRequest(world_name=world))


def test_destroy_world_errors(catch_server):
    with servers.official(catch_server.address) as conn:
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.DestroyWorldRequest(world_name="nowhere"))
        assert _code(excinfo) == NOT_FOUND and "'nowhere'" in excinfo.value.message
        world = conn.send(dpb.CreateWorldRequest()).world_name
        conn.send(dpb.JoinWorldRequest(world_name=world))
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.DestroyWorldRequest(world_name=world))
        assert _code(excinfo) == FAILED_PRECONDITION and "this connection is joined" in excinfo.value.message
        conn.send(dpb.LeaveWorldRequest())
        conn.send(dpb.DestroyWorldRequest(world_name=world))
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.JoinWorldRequest(world_name=world))
        assert _code(excinfo) == NOT_FOUND


def test_several_worlds_at_once(catch_server):
    with servers.official(catch_server.address) as a, servers.official(catch_server.address) as b:
        small = a.send(dpb.CreateWorldRequest(settings={"rows": servers.tensor(3)})).world_name
        large = b.send(dpb.CreateWorldRequest(settings={"rows": servers.tensor(12)})).world_name
        assert small != large
        a.send(dpb.JoinWorldRequest(world_name=small))
        b.send(dpb.JoinWorldRequest(world_name=large))
        states = {"a": [], "b": []}
        for _ in range(12):
            states["a"].append(a.send(_step_request()).state)
            states["b"].append(b.send(_step_request()).state)
        assert states["a"][:4] == [dpb.RUNNING, dpb.RUNNING, dpb.TERMINATED, dpb.RUNNING]
        assert states["b"][11] == dpb.TERMINATED and dpb.TERMINATED not in states["b"][:11]
        for conn, world in ((a, small), (b, large)):
            conn.send(dpb.LeaveWorldRequest())
            conn.send(dpb.DestroyWorldRequest(world_name=world))


class Fragile(Catch):
    """Catch whose step raises on the third step of an episode."""

    def step(self, action):
        if self.ball[0] == 2:
            raise RuntimeError("the paddle broke")
        return super().step(action)


def test_an_env_error_is_answered_and_the_next_step_starts_over():
    with servers.start(Fragile) as server, servers.official(server.address) as conn:
        conn.send(dpb.JoinWorldRequest(world_name=""))
        assert [conn.send(_step_request()).state for _ in range(3)] == [dpb.RUNNING] * 3
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(_step_request())
        assert _code(excinfo) == INTERNAL and "RuntimeError: the paddle broke" in excinfo.value.message
        assert conn.send(_step_request()).state == dpb.RUNNING


# -- properties ----------------------------------------------------------------------------------------

def test_properties_list_read_write(catch_server):
    with servers.official(catch_server.address) as conn:
        props = dm_properties.PropertiesExtension(conn)
        assert props["env_id"] == "dmrpc_gym.worlds.catch:Catch"
        assert set(props.specs()) == {"env_id", "worlds", "server_instance", "render_failure",
                                      "dmrpc_gym.server_status", "dmrpc_gym.watch", "dmrpc_gym.watch_frame"}
        assert len(props["server_instance"]) == 32           # a fresh id per run of the server
        with pytest.raises(KeyError):
            props["seed"]  # world properties need a joined world
        world = conn.send(dpb.CreateWorldRequest(settings={"seed": servers.tensor(4)})).world_name
        assert world in list(props["worlds"])
        conn.send(dpb.JoinWorldRequest(world_name=world))
        specs = props.specs()
        assert set(specs) == {"env_id", "worlds", "server_instance", "render_failure", "dmrpc_gym.server_status",
                              "dmrpc_gym.watch", "dmrpc_gym.watch_frame", "world_name", "seed", "episode_step", "episode_return", "spaces", "frame"}
        assert not specs["frame"].writable and specs["spaces"].readable
        assert specs["seed"].writable and specs["seed"].readable and not specs["episode_step"].writable
        assert props["seed"] == 4 and props["world_name"] == world
        conn.send(_step_request())
        for _ in range(9):
            conn.send(_step_request(actions={1: servers.tensor(np.int8(0))}))
        assert props["episode_step"] == 9 and props["episode_return"] in (1.0, -1.0)
        board = lambda: servers.unpack(conn.send(_step_request(requested_observations=[1])).observations[1])  # noqa: E731
        props["seed"] = 123
        assert props["seed"] == 123
        first = board()  # the next sequence starts with the written seed
        props["seed"] = 123
        conn.send(dpb.ResetRequest())
        assert np.array_equal(board(), first)
        with pytest.raises(PermissionError):
            props["episode_step"] = 3
        with pytest.raises(ValueError):
            props["seed"] = -4
        with pytest.raises(ValueError):
            props["seed"] = "four"
        with pytest.raises(KeyError):
            props["gravity"]
        conn.send(dpb.LeaveWorldRequest())
        conn.send(dpb.DestroyWorldRequest(world_name=world))


def test_unknown_extensions_are_unimplemented(catch_server):
    from google.protobuf import any_pb2, struct_pb2
    packed = any_pb2.Any()
    packed.Pack(struct_pb2.Struct())
    with servers.official(catch_server.address) as conn:
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(packed)
        assert _code(excinfo) == UNIMPLEMENTED and "google.protobuf.Struct" in excinfo.value.message


# -- our own client, and the server's lifecycle ---------------------------------------------------------

def test_our_connection_and_errors(catch_server):
    with Connection(catch_server.address) as conn:
        specs = conn.send(pb.JoinWorldRequest(world_name="")).specs
        assert [s.name for s in specs.actions.values()] == ["paddle"]
        with pytest.raises(DmRpcError) as excinfo:
            conn.send(pb.JoinWorldRequest(world_name=""))
        assert excinfo.value.code_name == "FAILED_PRECONDITION"
        conn.send(pb.LeaveWorldRequest())


def test_several_servers_in_one_process_and_stop_is_prompt():
    first = serve(Catch)
    second = Server("CartPole-v1").start()
    try:
        assert first.port != second.port
        with servers.official(first.address) as a, servers.official(second.address) as b:
            a.send(dpb.JoinWorldRequest(world_name=""))
            b.send(dpb.JoinWorldRequest(world_name=""))
            for _ in range(5):
                assert a.send(_step_request()).state in (dpb.RUNNING, dpb.TERMINATED)
                assert b.send(_step_request()).state in (dpb.RUNNING, dpb.TERMINATED)
            # Stopping one server, with a client still joined, leaves the other serving.
            first.stop()
            with pytest.raises((grpc.RpcError, ValueError, dm_error.DmEnvRpcError)):
                a.send(_step_request())
            assert b.send(_step_request()).state in (dpb.RUNNING, dpb.TERMINATED, dpb.INTERRUPTED)
    finally:
        first.stop()
        first.stop()  # idempotent
        second.stop()
    with pytest.raises(RuntimeError):
        second.start()


def test_busy_address_and_bad_factories():
    with servers.start(Catch) as server:
        with pytest.raises(OSError, match=str(server.port)):
            Server(Catch, address=server.address).start()
    with pytest.raises(ValueError, match="CartPol"):
        Server("CartPol-v1")
    with pytest.raises(ValueError, match="no attribute"):
        Server("dmrpc_gym.worlds.catch:Nope")
    with pytest.raises(TypeError):
        Server(42)
    with pytest.raises(ValueError, match="host:port"):
        Server(Catch, address="nowhere")


def test_module_factory_strings_resolve():
    with Server("dmrpc_gym.worlds.catch:make_catch") as server, servers.official(server.address) as conn:
        specs = conn.send(dpb.JoinWorldRequest(world_name="")).specs
        assert [s.name for s in specs.observations.values()][0] == "board"
    # A factory that returns something else is refused when a world is made.
    with Server(lambda: object()) as server, servers.official(server.address) as conn:
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.CreateWorldRequest())
        assert _code(excinfo) == FAILED_PRECONDITION and "object" in excinfo.value.message


def test_a_dict_and_tuple_env_gets_dotted_names():
    class Robot(gym.Env):
        observation_space = gym.spaces.Dict({
            "pos": gym.spaces.Box(-1, 1, (2,), np.float32),
            "status": gym.spaces.Dict({"ok": gym.spaces.MultiBinary(1), "mode": gym.spaces.Discrete(3)})})
        action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (), np.float64)))

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self.observation_space.sample(), {}

        def step(self, action):
            assert self.action_space.contains(action), action
            return self.observation_space.sample(), float(action[1]), False, False, {}

    with servers.start(Robot) as server, servers.official(server.address) as conn:
        specs = conn.send(dpb.JoinWorldRequest(world_name="")).specs
        acts, obs = servers.uids(specs)
        assert list(acts) == ["action.0", "action.1"]
        assert list(obs) == ["pos", "status.mode", "status.ok", "reward", "discount"]
        conn.send(_step_request())
        response = conn.send(_step_request(actions={acts["action.1"]: servers.tensor(0.25)},
                                           requested_observations=[obs["reward"], obs["status.ok"]]))
        assert servers.unpack(response.observations[obs["reward"]]) == 0.25
        assert servers.unpack(response.observations[obs["status.ok"]]).dtype == np.bool_


def test_pipelined_requests_are_answered_in_order(catch_server):
    with servers.RawStream(catch_server.address) as stream:
        world = stream.send(create_world=pb.CreateWorldRequest(
            settings={"rows": tensors.pack(4)})).create_world.world_name
        batch = [pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name=world))]
        batch += [pb.EnvironmentRequest(step=pb.StepRequest())] * 7
        batch += [pb.EnvironmentRequest(leave_world=pb.LeaveWorldRequest()),
                  pb.EnvironmentRequest(destroy_world=pb.DestroyWorldRequest(world_name=world))]
        for request in batch:  # all written before any answer is read
            stream.write(request.SerializeToString())
        answers = [stream.read() for _ in batch]
        assert [a.WhichOneof("payload") for a in answers] == (
            ["join_world"] + ["step"] * 7 + ["leave_world", "destroy_world"])
        # Rows=4: the ball lands on the third step of each sequence.
        assert [a.step.state for a in answers[1:8]] == [
            pb.RUNNING, pb.RUNNING, pb.RUNNING, pb.TERMINATED, pb.RUNNING, pb.RUNNING, pb.RUNNING]


def test_without_a_default_world_clients_must_create_one():
    with servers.start(Catch, default_world=False) as server, servers.official(server.address) as conn:
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            conn.send(dpb.JoinWorldRequest(world_name=""))
        assert _code(excinfo) == NOT_FOUND and "no default world" in excinfo.value.message
        world = conn.send(dpb.CreateWorldRequest()).world_name
        conn.send(dpb.JoinWorldRequest(world_name=world))
        assert conn.send(_step_request()).state == dpb.RUNNING
    with pytest.raises(ValueError, match="timeout"):
        Server(Catch, timeout=0)
