"""The steady-state step path (issue 32) against the general path it mirrors: a differential test.

Hypothesis draws a world (observation specs of every fixed-width and varint dtype and shape, a Discrete or
a Box action), a run of actions (some invalid) and the server's answer to each step: the same layout with
new values, or another state, an error, another shape, an observation missing or added, another order, an
``info``, or flipped bytes; each answer framed as drawn (its DATA payload cut into frames, padded or not,
PINGs, WINDOW_UPDATEs and SETTINGS between them, the bytes cut into separate writes). The same script runs
against a client with the steady path off (``DMRPC_STEADY_STEP=0``) and on; both must send the very same bytes
and return the same values, dtypes and types, or raise the same errors.
"""
from __future__ import annotations

import contextlib
import os
import struct

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scripted_h2 import ScriptedServer, ping
from fuzzing import both_paths, fuzz_settings  # noqa: F401 - both_paths: a fixture

from dmrpc_gym.protocol.region_refs import REQUEST_HEADER
from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.steady_step import STEADY_STEP_ENV
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.info import INFO_UID, info_tensor_bytes, pack_info
from dmrpc_gym.protocol.protowire import varint
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.spaces.codec import specs_from_space
from dmrpc_gym.transport.frames import SETTINGS, U32, WINDOW_UPDATE

_FIXED = [np.float32, np.float64, np.int8, np.uint8]           # what the steady path reads
_DTYPES = _FIXED * 3 + [np.int32, np.int64, np.bool_]
_SHAPES = [(), (3,), (2, 2)]
_KINDS = ["same"] * 6 + ["terminated", "interrupted", "error", "shape", "missing", "extra", "order", "info", "flip"]
_PLAIN = ["same"] * 6 + ["terminated", "interrupted"]      # (an episode's end: a vector env meets one often)


pytestmark = pytest.mark.usefixtures("not_in_a_kernel")     # (tests/conftest.py)


def observation_space(dtype, shape) -> gym.Space:
    if dtype is np.bool_:
        return gym.spaces.MultiBinary(shape or 1) if shape else gym.spaces.Box(0, 1, (), np.bool_)
    if np.dtype(dtype).kind == "f":
        return gym.spaces.Box(-10, 10, shape, dtype)
    return gym.spaces.Box(np.iinfo(dtype).min // 2, np.iinfo(dtype).max // 2, shape, dtype)


@st.composite
def worlds(draw):
    """``(specs, observation layout [(uid, name, dtype, shape)], action space)``."""
    specs, layout = pb.ActionObservationSpecs(), []
    for i in range(draw(st.integers(1, 3))):
        dtype, shape = draw(st.sampled_from(_DTYPES)), draw(st.sampled_from(_SHAPES))
        spec = specs_from_space(observation_space(dtype, shape), f"o{i}")[f"o{i}"]
        specs.observations[i + 1].CopyFrom(spec)
        layout.append((i + 1, f"o{i}", np.dtype(spec_dtype(spec)), tuple(spec.shape)))
    for uid, name in ((10, "reward"), (11, "discount")):
        if draw(st.booleans()) or name == "reward":
            dtype = draw(st.sampled_from([np.float64, np.float32]))
            specs.observations[uid].CopyFrom(specs_from_space(gym.spaces.Box(-1e9, 1e9, (), dtype), name)[name])
            layout.append((uid, name, np.dtype(dtype), ()))
    action = gym.spaces.Discrete(draw(st.integers(2, 300))) if draw(st.booleans()) \
        else gym.spaces.Box(-1, 1, (2,), np.float32)
    specs.actions[1].CopyFrom(specs_from_space(action, "a")["a"])
    return specs, layout, action


def spec_dtype(spec: pb.TensorSpec):
    return tensors.np_dtype(spec.dtype)


def values(draw, dtype: np.dtype, shape: tuple) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype.kind == "f":
        items = draw(st.lists(st.floats(-1e6, 1e6, width=dtype.itemsize * 8) | st.just(float("nan")),
                              min_size=n, max_size=n))
    elif dtype.kind == "b":
        items = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    else:
        info = np.iinfo(dtype)
        items = draw(st.lists(st.integers(max(info.min, -(1 << 40)), min(info.max, 1 << 40)), min_size=n, max_size=n))
    return np.array(items, dtype).reshape(shape)


def entry(uid: int, tensor: bytes) -> bytes:
    body = b"\x08" + varint(uid) + b"\x12" + varint(len(tensor)) + tensor
    return b"\x12" + varint(len(body)) + body


@st.composite
def answers(draw, layout: list, info: bool):
    """One step's answer: ``(kind, scripted_h2.Answer)``."""
    plain = draw(st.integers(0, 2)) > 0                 # the steady case, framed as our server frames it
    kind = draw(st.sampled_from(_PLAIN)) if plain else draw(st.sampled_from(_KINDS))
    if kind == "error":
        message = pb.EnvironmentResponse(error={"code": 3, "message": "refused"}).SerializeToString()
    else:
        items = list(layout)
        if kind == "missing" and len(items) > 1:
            items.pop(draw(st.integers(0, len(items) - 1)))
        if kind == "order":
            items = draw(st.permutations(items))
        body = b""
        for uid, _, dtype, shape in items:
            if kind == "shape" and shape:
                shape = (int(np.prod(shape)),) if len(shape) > 1 else (1, shape[0])
            body += entry(uid, tensors.pack(values(draw, dtype, shape), dtype).SerializeToString())
        if kind == "extra":
            body += entry(99, tensors.pack(np.float32(1)).SerializeToString())
        if info and (kind == "info" or draw(st.booleans())):     # of any size: the envelope's length varies
            said = {"n": draw(st.integers(0, 9)), "s": "x" * draw(st.sampled_from([0, 1, 5, 60, 130, 300]))}
            body += entry(INFO_UID, info_tensor_bytes(pack_info(said)))
        state = {"terminated": pb.TERMINATED, "interrupted": pb.INTERRUPTED}.get(kind, pb.RUNNING)
        step = b"\x08" + varint(state) + body if draw(st.booleans()) else body + b"\x08" + varint(state)
        message = b"\x1a" + varint(len(step)) + step
        if kind == "flip":
            at = draw(st.integers(0, len(message) - 1))
            message = message[:at] + bytes([message[at] ^ (1 << draw(st.integers(0, 7)))]) + message[at + 1:]
    if plain:
        return kind, (message, [], [], False, [])
    size = len(message) + 5
    cuts = draw(st.lists(st.integers(1, size), max_size=2)) if draw(st.booleans()) else []
    between = st.lists(st.sampled_from([ping(), (WINDOW_UPDATE, 0, 0, U32.pack(1000)),
                                        (WINDOW_UPDATE, 0, 1, U32.pack(1000)), (SETTINGS, 0, 0, b"")]), max_size=2)
    before = draw(st.lists(between, max_size=len(cuts) + 1)) if draw(st.integers(0, 3)) == 0 else []
    writes = draw(st.lists(st.integers(1, size + 40), max_size=2)) if draw(st.integers(0, 3)) == 0 else []
    return kind, (message, cuts, before, draw(st.integers(0, 5)) == 0, writes)


@st.composite
def scripts(draw):
    specs, layout, action = draw(worlds())
    info = draw(st.booleans())
    n = draw(st.integers(1, 8))
    steps = [draw(answers(layout, info)) for _ in range(n + 1)]        # (the reset's step first)
    if isinstance(action, gym.spaces.Discrete):
        pick = st.one_of(st.integers(0, action.n - 1).map(np.int64), st.integers(0, action.n - 1),
                         st.just(action.n + 3))
    else:
        pick = st.lists(st.floats(-1, 1, width=32), min_size=2, max_size=2).map(lambda v: np.array(v, np.float32)) \
            | st.just(np.array([5, 0], np.float32))
    return specs, info, [answer for _, answer in steps], draw(st.lists(pick, min_size=n, max_size=n))


def run(script, steady: bool):
    """The client's frames and what each call returned or raised, with the steady path ``steady``."""
    specs, info, steps, actions = script
    server = ScriptedServer(specs, steps, info)
    outcomes = []
    os.environ[STEADY_STEP_ENV] = "1" if steady else "0"
    try:
        with DmRpcEnv(server.address, connect_timeout=5) as env:
            for call in [None, *actions]:
                try:
                    outcomes.append(env.reset() if call is None else env.step(call))
                except Exception as err:  # noqa: BLE001 - compared by type and text (the address left out)
                    outcomes.append((type(err), str(err).replace(server.address, "ADDRESS")))
            used = env._agent.steady is not None and env._agent.steady.layout is not None
    finally:
        os.environ.pop(STEADY_STEP_ENV, None)
    server.join(15)
    assert not server.is_alive()
    return without_nonce(server.received), outcomes, used


def without_nonce(frames: list) -> list:
    """The frames with the shared-memory request header's value (a fresh nonce per stream) left out."""
    return [(*frame[:-1], [(k, "NONCE" if k == REQUEST_HEADER else v) for k, v in frame[-1]])
            if isinstance(frame, tuple) and frame and isinstance(frame[-1], list) else frame for frame in frames]


def same(a, b) -> bool:
    """Equal values of the same types (arrays: dtype, shape, values with NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.flags.writeable == b.flags.writeable \
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def test_the_steady_path_and_the_general_path_agree(monkeypatch):
    from dmrpc_gym.client.states import State
    from dmrpc_gym.client.steady_step import SteadyStep
    steady_used, finished, ended, wrap = [], [], [], SteadyStep.wrap

    def counted(self, named, state=State.RUNNING):
        finished.append(self.hidden[0] is not None)        # (an answer taken on the steady path: with an info?)
        ended.append(state is not State.RUNNING)           # (one that ends the episode?)
        return wrap(self, named, state)

    monkeypatch.setattr(SteadyStep, "wrap", counted)

    @fuzz_settings(60)
    @given(scripts())
    def check(script):
        general_bytes, general_out, _ = run(script, steady=False)
        steady_bytes, steady_out, used = run(script, steady=True)
        steady_used.append(used)
        assert steady_bytes == general_bytes
        assert len(steady_out) == len(general_out)
        for got, want in zip(steady_out, general_out):
            assert same(got, want), (got, want)

    check()
    print(f"{sum(steady_used)} of {len(steady_used)} examples learned a layout; {len(finished)} answers taken on the steady path, "
          f"{sum(finished)} of them with an info, {sum(ended)} ending the episode")
    assert any(steady_used) and finished, "no example took the steady path"
    assert any(ended), "no answer that ends an episode took the steady path"


def test_answers_whose_info_changes_size_take_the_steady_path_while_their_envelope_keeps_its_width(monkeypatch):
    """Every answer with an info of another size (none, small, and past what a one-byte length holds):
    the steady path takes those whose lengths keep their width, the general path the others, alike."""
    from dmrpc_gym.client.steady_step import SteadyStep
    specs = pb.ActionObservationSpecs()
    specs.observations[1].CopyFrom(specs_from_space(gym.spaces.Box(-1, 1, (3,), np.float32), "o")["o"])
    specs.observations[10].CopyFrom(specs_from_space(gym.spaces.Box(-9, 9, (), np.float64), "reward")["reward"])
    specs.actions[1].CopyFrom(specs_from_space(gym.spaces.Discrete(3), "a")["a"])
    steps = []
    for i, size in enumerate([0, 3, 10, 0, 1, 40, 200, 5, 0, 7, 300, 2, 8]):
        body = b"\x08" + varint(pb.RUNNING) + entry(1, tensors.pack(np.full(3, i / 10, np.float32)).SerializeToString())
        body += entry(10, tensors.pack(np.float64(i)).SerializeToString())
        if size:
            body += entry(INFO_UID, info_tensor_bytes(pack_info({"i": i, "s": "x" * size})))
        steps.append((b"\x1a" + varint(len(body)) + body, [], [], False, []))
    taken, named = [], SteadyStep._named

    def counted(self, message):
        taken.append(self.hidden[0] is not None)
        return named(self, message)

    monkeypatch.setattr(SteadyStep, "_named", counted)
    script = (specs, True, steps, [np.int64(i % 3) for i in range(len(steps) - 1)])
    general_bytes, general_out, _ = run(script, steady=False)
    steady_bytes, steady_out, used = run(script, steady=True)
    assert used and steady_bytes == general_bytes and same(steady_out, general_out)
    assert steady_out[5][4] == {"i": 5, "s": "x" * 40}          # (the reset answered the first)
    # learned from the reset's answer; of the 12 steps, the two whose info takes the length past 127 bytes
    # go the general way, the other 10 (8 with an info) the steady way
    assert taken == [True, True, False, True, True, True, False, True, True, True], taken


def test_a_steady_catch_episode_takes_the_steady_path_and_matches_the_general_one():
    from dmrpc_gym.server import Server
    from dmrpc_gym.worlds.catch import Catch
    results = {}
    for steady in (False, True):
        os.environ[STEADY_STEP_ENV] = "1" if steady else "0"
        try:
            with Server(Catch) as server, DmRpcEnv(server.address) as env:
                out = [env.reset(seed=3)]
                out += [env.step(np.int8(a)) for a in [0, 1, -1, 1, 0, 0, 1, -1, 0, 1, 1, 0]]
                results[steady] = out, env._agent.steady
        finally:
            os.environ.pop(STEADY_STEP_ENV, None)
    assert results[False][1] is None and results[True][1].layout is not None
    assert same(results[True][0], results[False][0])


def test_the_switch_is_read_from_the_environment(monkeypatch):
    from dmrpc_gym.client.steady_step import enabled
    monkeypatch.setenv(STEADY_STEP_ENV, "0")
    assert not enabled()
    monkeypatch.setenv(STEADY_STEP_ENV, "1")
    assert enabled() is (struct.pack("=H", 1) == b"\x01\x00")


def test_a_vector_env_reads_steady_answers_and_matches_the_general_path():
    """A vector env's pipelined steps (submit, then receive) take the message-level decoder."""
    import gymnasium as gym

    from dmrpc_gym.server import Server
    from dmrpc_gym.worlds.catch import Catch
    results, learned, batched = {}, {}, {}
    actions = np.random.default_rng(0).integers(-1, 2, (40, 3)).astype(np.int8)
    for steady in (False, True):
        os.environ[STEADY_STEP_ENV] = "1" if steady else "0"
        try:
            with Server(Catch) as server, batch_answers() as answers:
                env = gym.make_vec("dmrpc/Remote-v0", num_envs=3, vectorization_mode="vector_entry_point",
                                   address=server.address)
                try:
                    out = [env.reset(seed=5)] + [env.step(a) for a in actions]
                    learned[steady] = [e.agent.steady is not None and e.agent.steady.layout is not None
                                     for e in env.unwrapped.envs]
                finally:
                    env.close()
            results[steady], batched[steady] = out, len(answers)
        finally:
            os.environ.pop(STEADY_STEP_ENV, None)
    assert learned == {False: [False] * 3, True: [True] * 3}
    assert same(results[True], results[False])
    # the vector step's steady path (one send, one read loop) took most sub-env steps once the layouts were learned
    assert batched[False] == 0 and batched[True] > 0.8 * actions.size, batched


@contextlib.contextmanager
def batch_answers():
    """The sub-env steps a vector step's steady read took (:meth:`SteadyBatch.answer`), as they are answered."""
    from dmrpc_gym.client.steady_batch import SteadyBatch
    taken, answer = [], SteadyBatch.answer

    def counted(self, i):
        taken.append(i)
        return answer(self, i)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SteadyBatch, "answer", counted)
        yield taken


class _Ending(gym.Env):
    """Pendulum-like (a Box action, an ``np.float64`` reward) with short episodes: terminated every 7th
    step of an episode, truncated every 5th, both every 11th step of the env (then the exact extras say so);
    an ``info`` now and then, from ``reset`` too."""

    observation_space = gym.spaces.Box(-10, 10, (3,), np.float32)
    action_space = gym.spaces.Box(-2, 2, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n, self.t = 0, 0 if seed is None else seed
        return np.full(3, self.t % 10, np.float32), ({"seed": seed} if seed is not None else {})

    def step(self, action):
        self.n, self.t = self.n + 1, self.t + 1
        obs = np.array([np.cos(self.t), np.sin(self.t), float(action[0])], np.float32)
        info = {"t": self.t} if self.t % 4 == 0 else {}
        both = self.t % 11 == 0
        return obs, np.float64(float(action[0]) * self.t), both or self.n % 7 == 0, both or self.n % 5 == 0, info


def test_a_vector_env_of_ending_episodes_and_box_actions_matches_the_general_path():
    """Episodes that end (terminated, truncated, both) every few steps, the autoreset steps after them,
    Box actions and ``np.float64`` rewards: the steady path on both ends (an end read at the offsets, the
    restart answered at once by the server) gives what the general path gives, value for value."""
    from dmrpc_gym import DmRpcVectorEnv
    from dmrpc_gym.client.states import State
    from dmrpc_gym.client.steady_step import SteadyStep
    from dmrpc_gym.server import Server
    from dmrpc_gym.server.serving.steady import SteadyServe

    ends, starts = [], []
    wrap, start = SteadyStep.wrap, SteadyServe._start

    def counted(self, named, state=State.RUNNING):
        ends.append(state is not State.RUNNING)
        return wrap(self, named, state)

    def started(self, *args):
        answer = start(self, *args)
        starts.append(answer is not None)
        return answer

    rng = np.random.default_rng(1)
    actions = [np.full((3, 1), 0.5, np.float32) if i % 3 else rng.uniform(-2, 2, (3, 1)).astype(np.float32)
               for i in range(80)]
    results, taken = {}, {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SteadyStep, "wrap", counted)
        patch.setattr(SteadyServe, "_start", started)
        for steady in (False, True):
            os.environ[STEADY_STEP_ENV] = "1" if steady else "0"
            try:
                with Server(_Ending, kind="gym", workers=0) as server, batch_answers() as batched:
                    envs = DmRpcVectorEnv(3, server.address)
                    try:
                        results[steady] = [envs.reset(seed=4)] + [envs.step(a) for a in actions]
                        taken[steady] = len(batched)
                        constant = [e.agent.steady is not None and e.agent.steady.candidates[0][4] is not None
                                    for e in envs.envs]
                    finally:
                        envs.close()
            finally:
                os.environ.pop(STEADY_STEP_ENV, None)
    assert same(results[True], results[False])
    flags = np.array([step[2] for step in results[True][1:]]), np.array([step[3] for step in results[True][1:]])
    assert flags[0].any() and flags[1].any() and (flags[0] & flags[1]).any()     # each kind of end came
    assert sum(ends) > 20, f"{sum(ends)} ends read at the offsets"
    assert sum(starts) > 20, f"{sum(starts)} restarts answered at once"
    assert constant == [True] * 3, "the exact extras' tail (the reward's type) was not learned as constant"
    assert taken[False] == 0 and taken[True] > 0.9 * 3 * len(actions), taken     # ends and restarts too


def test_a_single_env_of_ending_episodes_and_box_actions_matches_the_general_path():
    """The same env through ``DmRpcEnv`` (round trips, the exact extras' tail learned as constant), reset
    where an episode ended, steady path on and off: the same values."""
    from dmrpc_gym.server import Server
    results, learned = {}, {}
    actions = [np.full(1, 0.5 if i % 3 else -1.5, np.float32) for i in range(60)]
    for steady in (False, True):
        os.environ[STEADY_STEP_ENV] = "1" if steady else "0"
        try:
            with Server(_Ending, kind="gym") as server, DmRpcEnv(server.address) as env:
                out = [env.reset(seed=2)]
                for action in actions:
                    out.append(env.step(action))
                    if out[-1][2] or out[-1][3]:
                        out.append(env.reset())
                learned[steady] = env._agent.steady is not None and env._agent.steady.first_hidden[1] is not None
            results[steady] = out
        finally:
            os.environ.pop(STEADY_STEP_ENV, None)
    assert learned == {False: False, True: True}
    assert same(results[True], results[False])


@pytest.mark.usefixtures("both_paths")
def test_a_box_actions_request_is_remembered_by_its_bytes_not_its_array():
    """An array action changed in place between steps is sent as it is now; one out of bounds is refused
    every time it is given (a refused action is never remembered)."""
    from dmrpc_gym.server import Server
    with Server(_Ending, kind="gym") as server, DmRpcEnv(server.address) as env:
        env.reset(seed=0)
        action, seen = np.zeros(1, np.float32), []
        for value in [0.0, 1.0, 0.0, 1.0, -1.5]:
            action[0] = value
            obs, *_ = env.step(action)
            seen.append(float(obs[2]))
        for _ in range(2):
            with pytest.raises(ValueError):
                env.step(np.full(1, 5.0, np.float32))
    assert seen == [0.0, 1.0, 0.0, 1.0, -1.5]


class _Interrupt(BaseException):
    """Stands in for KeyboardInterrupt, without risking pytest's own handling of it."""


class _Counting(gym.Env):
    """Observes how many steps it took; the fifth takes 0.6 s."""

    observation_space = gym.spaces.Box(0, 1000, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.n = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.n += 1
        if self.n == 5:
            import time
            time.sleep(0.6)
        return np.full(1, self.n, np.float32), 1.0, False, False, {}


def test_an_interrupt_in_a_steady_step_never_hands_its_answer_to_the_next_step():
    """Ctrl-C while the steady path waits for its answer: the late answer is dropped, the next step
    gets its own (as the general path guarantees)."""
    import signal
    import threading

    from dmrpc_gym.server import Server

    def raise_interrupt(signum, frame):
        raise _Interrupt()

    previous = signal.signal(signal.SIGUSR1, raise_interrupt)
    try:
        with Server(_Counting, kind="gym") as server, DmRpcEnv(server.address) as env:
            env.reset()
            assert [env.step(0)[0][0] for _ in range(4)] == [1, 2, 3, 4]
            assert env._agent.steady.layout is not None
            timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
            timer.start()
            with pytest.raises(_Interrupt):
                env.step(0)                    # the fifth: its answer comes 0.6 s later
            timer.join()
            assert [env.step(0)[0][0] for _ in range(3)] == [6, 7, 8]
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _catch_run(steady: bool, script) -> tuple:
    """``script(envs)`` on a 3-env ``DmRpcVectorEnv`` of Catch with the steady path ``steady``: what it returned,
    and how many sub-env steps the vector step's steady read took."""
    from dmrpc_gym import DmRpcVectorEnv
    from dmrpc_gym.server import Server
    from dmrpc_gym.worlds.catch import Catch
    os.environ[STEADY_STEP_ENV] = "1" if steady else "0"
    try:
        with Server(Catch) as server, batch_answers() as taken:
            envs = DmRpcVectorEnv(3, server.address, batch_size=2)
            try:
                return script(envs), len(taken)
            finally:
                envs.close()
    finally:
        os.environ.pop(STEADY_STEP_ENV, None)


def test_a_vector_step_whose_one_send_is_refused_goes_the_general_way():
    """Where the transport sends nothing (``send_frames``: NOT_SENT, every other step here), the sub-envs'
    requests go the general way in the same step: the same values, some steps taken by the batch read."""
    from dmrpc_gym.transport.client.steady import NOT_SENT, SteadyTrips
    actions = np.random.default_rng(2).integers(-1, 2, (40, 3)).astype(np.int8)
    send, calls = SteadyTrips.send_frames, [0]

    def every_other(self, links, frames):
        calls[0] += 1
        return NOT_SENT if calls[0] % 2 else send(self, links, frames)

    def script(envs):
        return [envs.reset(seed=2)] + [envs.step(a) for a in actions]
    general, none = _catch_run(False, script)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SteadyTrips, "send_frames", every_other)
        steady, taken = _catch_run(True, script)
    assert same(steady, general)
    assert none == 0 and 0.3 * actions.size < taken < 0.7 * actions.size, taken


def test_async_batches_on_the_steady_path_match_the_general_path():
    """``send`` / ``recv`` of 2 of 3 sub-envs at a time (the answers taken in the order they come): each
    sub-env's own steps are the same on either path. The requests go in one send each; the answers are read
    the general way (``recv`` first looks at what came, by the general read: the batch read would wait for all)."""
    from dmrpc_gym.client.steady_batch import SteadyBatch
    def script(envs):
        envs.reset(seed=3)
        per_env, counts = {i: [] for i in range(3)}, [0, 0, 0]
        envs.send(np.zeros(3, np.int8))
        for _ in range(60):
            obs, rewards, terminated, truncated, _, ids = envs.recv()
            for k, i in enumerate(ids):
                per_env[int(i)].append((obs[k].copy(), rewards[k], terminated[k], truncated[k]))
                counts[int(i)] += 1
            envs.send(np.array([counts[int(i)] % 3 - 1 for i in ids], np.int8), ids)
        envs.recv()
        return [per_env[i][:15] for i in range(3)]
    send, sent = SteadyBatch.send, []

    def counted(self, framed, failures):
        out = send(self, framed, failures)
        sent.extend(out)
        return out
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SteadyBatch, "send", counted)
        general, none = _catch_run(False, script)
        assert sent == [] and none == 0
        steady, taken = _catch_run(True, script)
    assert same(steady, general)
    assert len(sent) > 80 and taken == 0, (len(sent), taken)
