"""The ecosystem's own checkers on the served env against the local env (issue 42).

Each env of the fidelity suite (:mod:`test_fidelity`'s cases: gymnasium's classic_control,
toy_text, Box2D and MuJoCo; PettingZoo parallel and AEC; dm_control; bsuite) is served by a
:class:`~dmrpc_gym.server.Server` on a loopback port (one at a time, in this process: its imports
are paid once) and read back through the public API. Each checker runs on the local env first:
that is the baseline. A checker that raises on the local env too is no finding; the served env
must do what the local env does: pass where it passes, and warn nothing it does not warn.

- gymnasium: ``gymnasium.utils.env_checker.check_env`` (on ``env.unwrapped``, as gymnasium advises;
  its render checks make an env of each of ``metadata["render_modes"]`` through the spec, but for
  MuJoCo, whose local ``human`` window aborts a headless process) and
  ``gymnasium.utils.env_match.check_environments_match`` (served against local);
- PettingZoo parallel: ``parallel_api_test``, ``parallel_seed_test`` and
  ``check_environment_deterministic_parallel`` (served against local);
- PettingZoo AEC: ``api_test``, ``seed_test`` and ``check_environment_deterministic``;
- dm_env: ``dm_env.test_utils.EnvironmentTestMixin``'s tests, and the TimeSteps' Python types
  (reward, discount, observation dtypes) against the local env's over two episodes' worth of steps.

A case that cannot pass is marked xfail (strict) with its reason in :data:`XFAIL`.
The suite is marked ``checkers`` (``pytest -m checkers`` runs it alone).
"""
from __future__ import annotations

import contextlib
import unittest
import warnings
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest

from fidelity_support import Case, close, local_env, remote_env
from test_fidelity import _MNIST, CASES

pytestmark = pytest.mark.checkers

CYCLES = 12          # PettingZoo's num_cycles
STEPS = 12           # check_environments_match's num_steps; dm_env steps compared

#: (case id or family, checker) -> why it cannot pass (a checker that fails on the local env too is
#: listed by the test itself, as an xfail naming the local failure).
XFAIL: dict[tuple[str, str], str] = {("bsuite:mnist/0", checker): _MNIST
                                     for checker in ("EnvironmentTestMixin", "timestep_types")}


def outcome(check: Callable[[], Any]) -> tuple[str | None, list[str]]:
    """``(error or None, warnings)`` of running ``check`` (the warnings' texts, deduplicated, in order)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error = None
        try:
            with contextlib.redirect_stdout(None):
                check()
        except Exception as exc:  # noqa: BLE001 - the checker's failure is what is compared
            error = f"{type(exc).__name__}: {exc}"
    said = []
    for w in caught:
        text = str(w.message)
        if text not in said and "is different from the unwrapped version" not in text:
            said.append(text)
    return error, said


# -- the checkers, each given a way to make the local env and the served env ---------------------

def gym_check_env(make: Callable[[], Any], render: bool = True) -> None:
    from gymnasium.utils.env_checker import check_env
    env = make()
    try:
        check_env(env.unwrapped, skip_render_check=not render)
    finally:
        close(env)


def gym_match(make: Callable[[], Any], local: Callable[[], Any]) -> None:
    from gymnasium.utils.env_match import check_environments_match
    a, b = local(), make()
    try:
        check_environments_match(a, b, num_steps=STEPS, seed=3, skip_render=True)
    finally:
        close(a, b)


def pz_parallel_api(make: Callable[[], Any]) -> None:
    from pettingzoo.test import parallel_api_test
    env = make()
    try:
        parallel_api_test(env, num_cycles=CYCLES)
    finally:
        close(env)


def pz_parallel_seed(make: Callable[[], Any]) -> None:
    from pettingzoo.test import parallel_seed_test
    parallel_seed_test(make, num_cycles=CYCLES)


def pz_parallel_match(make: Callable[[], Any], local: Callable[[], Any]) -> None:
    from pettingzoo.test.seed_test import check_environment_deterministic_parallel
    check_environment_deterministic_parallel(local(), make(), CYCLES)


def pz_api(make: Callable[[], Any]) -> None:
    from pettingzoo.test import api_test
    env = make()
    try:
        api_test(env, num_cycles=CYCLES)
    finally:
        close(env)


def pz_seed(make: Callable[[], Any]) -> None:
    from pettingzoo.test import seed_test
    seed_test(make, num_cycles=CYCLES)


def pz_match(make: Callable[[], Any], local: Callable[[], Any]) -> None:
    from pettingzoo.test.seed_test import check_environment_deterministic
    check_environment_deterministic(local(), make(), CYCLES)


def dm_mixin(make: Callable[[], Any]) -> None:
    """``dm_env.test_utils.EnvironmentTestMixin``'s tests, run by unittest; the first failure raised."""
    from dm_env import test_utils

    class Mixin(test_utils.EnvironmentTestMixin, unittest.TestCase):
        def make_object_under_test(self):
            return make()

        def tearDown(self):
            close(self.object_under_test)

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Mixin).run(result)
    problems = result.failures + result.errors
    if problems:
        test, trace = problems[0]
        raise AssertionError(f"{test.id().rsplit('.', 1)[-1]}: {trace.strip().splitlines()[-1]}")


def dm_types(make: Callable[[], Any], local: Callable[[], Any]) -> None:
    """The TimeSteps' types (step type, reward, discount, observation leaves' types and dtypes) equal."""
    from fidelity_support import ACTION_SEED, draw
    a, b = local(), make()
    try:
        rng_a, rng_b = np.random.default_rng(ACTION_SEED), np.random.default_rng(ACTION_SEED)
        steps = [(a.reset(), b.reset())]
        for _ in range(STEPS):
            steps.append((a.step(draw(a.action_spec(), rng_a)), b.step(draw(b.action_spec(), rng_b))))
        for i, (want, got) in enumerate(steps):
            assert kinds(got) == kinds(want), f"step {i}: {kinds(got)} where the local env gives {kinds(want)}"
    finally:
        close(a, b)


def kinds(timestep: Any) -> Any:
    def kind(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: kind(v) for k, v in value.items()}
        return (type(value).__name__, getattr(value, "dtype", None))
    return {"reward": kind(timestep.reward), "discount": kind(timestep.discount),
            "observation": kind(timestep.observation)}


#: kind -> checker name -> (checker, takes the local maker too).
CHECKERS: dict[str, dict[str, tuple[Callable, bool]]] = {
    "gym": {"check_env": (gym_check_env, False), "check_environments_match": (gym_match, True)},
    "parallel": {"parallel_api_test": (pz_parallel_api, False), "parallel_seed_test": (pz_parallel_seed, False),
                 "check_environment_deterministic_parallel": (pz_parallel_match, True)},
    "aec": {"api_test": (pz_api, False), "seed_test": (pz_seed, False),
            "check_environment_deterministic": (pz_match, True)},
    "dm_env": {"EnvironmentTestMixin": (dm_mixin, False), "timestep_types": (dm_types, True)},
}

#: Families whose local ``human`` mode needs a display (MuJoCo's GLFW window aborts the process
#: headless): check_env runs without its render checks on both sides.
NO_HUMAN = {"mujoco"}
#: The envs: the fidelity suite's.
ENVS = list(CASES)


def _params() -> list:
    params = []
    for case in ENVS:
        for name in CHECKERS[case.kind]:
            reason = XFAIL.get((case.id, name)) or XFAIL.get((case.family, name))
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            params.append(pytest.param(case, name, marks=marks, id=f"{case.id}-{name}"))
    return params


class Served:
    """The server of the case whose tests run now (one at a time, started in this process)."""

    def __init__(self):
        self.case: Case | None = None
        self.server: Any = None

    def address(self, case: Case) -> str:
        if self.case is None or self.case.id != case.id:
            self.close()
            from dmrpc_gym.server import Server
            self.server, self.case = Server(case.target).start(), case
        return self.server.address

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = self.case = None


@pytest.fixture(scope="module")
def served():
    pool = Served()
    yield pool
    pool.close()


def makers(case: Case, address: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``(served, local)``: builders of the served env and of the local env, as a user builds each."""
    return (lambda: remote_env(case, address)), (lambda: local_env(case))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case, checker", _params())
def test_served_env_passes_what_the_local_env_passes(case: Case, checker: str, served: Served):
    check, compares = CHECKERS[case.kind][checker]
    if case.family in NO_HUMAN and checker == "check_env":
        check = lambda make: gym_check_env(make, render=False)     # noqa: E731
    served_env, local = makers(case, served.address(case))
    args = (local,) if compares else ()
    baseline = outcome(lambda: check(local, *args)) if not compares else outcome(lambda: check(local, local))
    got = outcome(lambda: check(served_env, *args))
    if baseline[0] is not None:          # the checker fails on the local env: no finding, listed as such
        pytest.xfail(f"{checker} fails on the local env too: {baseline[0][:300]}")
    assert got[0] is None, f"{checker} fails on the served env ({got[0]}); it passes on the local env"
    extra = [w for w in got[1] if w not in baseline[1]]
    assert not extra, f"{checker} warns on the served env what it does not on the local env: {extra}"
