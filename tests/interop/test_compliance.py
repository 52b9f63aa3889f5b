"""The official dm_env_rpc compliance suite against our server, over real gRPC.

Targets: CartPole-v1 served through the code path of ``dmrpc-gym serve CartPole-v1``,
the bundled Catch world (with its RGB observation), and a factory with a
required argument (CreateWorld must refuse to build it without that setting).
A last test runs the real CLI in a subprocess and plays the suite's Step
subset against the address it prints.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import unittest

from dm_env_rpc.v1 import compliance
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb

import servers
from dmrpc_gym.worlds.catch import Catch


def catch_of(rows: int, columns: int = 10, render_mode: str | None = None) -> Catch:
    """A factory with a required argument."""
    return Catch(rows, columns, render_mode)


_SERVERS: dict[str, object] = {}


def _server(target: str):
    server = _SERVERS.get(target)
    if server is None:
        if target == "CartPole-v1":
            server = servers.serve_like_cli("CartPole-v1")
        elif target == "catch":
            server = servers.start(Catch)
        else:
            server = servers.start(catch_of)
        _SERVERS[target] = server
    return server


def teardown_module() -> None:
    for server in _SERVERS.values():
        server.stop()
    _SERVERS.clear()


class _Connected:
    """Mixin: a fresh official connection per test, to the class's server."""

    target = "catch"
    join_settings: dict = {}

    def setUp(self) -> None:
        super().setUp()
        self._client = servers.OfficialClient(_server(self.target).address)

    def tearDown(self) -> None:
        try:
            super().tearDown()
        finally:
            self._client.close()

    @property
    def connection(self):
        return self._client.connection


class _WithWorld(_Connected):
    """Mixin: a world created for each test, destroyed after it (after the suite's own tearDown)."""

    world_settings: dict = {}

    def setUp(self) -> None:
        super().setUp()
        self._world = self.connection.send(dpb.CreateWorldRequest(settings=self.world_settings)).world_name

    def tearDown(self) -> None:
        try:
            super().tearDown()
        finally:
            # A fresh connection: the test's own may still be joined (the suite's tearDown leaves it).
            with servers.official(_server(self.target).address) as other:
                other.send(dpb.DestroyWorldRequest(world_name=self._world))

    @property
    def world_name(self) -> str:
        return self._world


class _Joins:
    """Mixin: joined to ``join_name`` for each test (the Step suite's precondition)."""

    def setUp(self) -> None:
        super().setUp()
        self._specs = self.connection.send(
            dpb.JoinWorldRequest(world_name=self.join_name, settings=self.join_settings)).specs

    def tearDown(self) -> None:
        self.connection.send(dpb.LeaveWorldRequest())
        super().tearDown()

    @property
    def specs(self):
        return self._specs


class _Joined(_Joins, _WithWorld):
    """Mixin: joined to the world created for the test."""

    @property
    def join_name(self) -> str:
        return self.world_name


# -- CartPole-v1, served as `dmrpc-gym serve CartPole-v1` serves it -------------------------

class TestCartPoleCreateDestroyWorld(_Connected, compliance.CreateDestroyWorld):
    target = "CartPole-v1"
    required_world_settings = {}
    invalid_world_settings = {
        "no_such_setting": servers.tensor(1),
        "max_episode_steps": servers.tensor("many"),
        "seed": servers.tensor(-1),
        "render_mode": servers.tensor("human"),
    }
    has_multiple_world_support = True


class TestCartPoleJoinLeaveWorld(_WithWorld, compliance.JoinLeaveWorld):
    target = "CartPole-v1"
    world_settings = {"seed": servers.tensor(1)}
    invalid_join_settings = {"no_such_setting": servers.tensor(1), "seed": servers.tensor(1.5)}


class TestCartPoleReset(_WithWorld, compliance.Reset):
    target = "CartPole-v1"

    def join_world(self):
        return self.connection.send(dpb.JoinWorldRequest(world_name=self.world_name)).specs


class TestCartPoleResetWorld(_WithWorld, compliance.ResetWorld):
    target = "CartPole-v1"
    required_reset_world_settings = {"seed": servers.tensor(5)}


class TestCartPoleStep(_Joined, compliance.Step):
    target = "CartPole-v1"
    world_settings = {"seed": servers.tensor(3), "max_episode_steps": servers.tensor(20)}


# -- the bundled Catch world (RGB observation included) ---------------------------------------

class TestCatchCreateDestroyWorld(_Connected, compliance.CreateDestroyWorld):
    required_world_settings = {}
    invalid_world_settings = {
        "speed": servers.tensor(2),
        "rows": servers.tensor(1),
        "columns": servers.tensor("wide"),
        "seed": servers.tensor("abc"),
    }
    has_multiple_world_support = True


class TestCatchJoinLeaveWorld(_WithWorld, compliance.JoinLeaveWorld):
    invalid_join_settings = {"rows": servers.tensor(5), "seed": servers.tensor(-2)}


class TestCatchReset(_WithWorld, compliance.Reset):
    required_reset_settings = {"seed": servers.tensor(7)}

    def join_world(self):
        return self.connection.send(dpb.JoinWorldRequest(world_name=self.world_name)).specs


class TestCatchResetWorld(_WithWorld, compliance.ResetWorld):
    required_reset_world_settings = {"seed": servers.tensor(9), "columns": servers.tensor(8)}
    required_join_world_settings = {"seed": servers.tensor(4)}


class TestCatchStep(_Joined, compliance.Step):
    world_settings = {"seed": servers.tensor(11)}


class TestCatchStepDefaultWorld(_Joins, _Connected, compliance.Step):
    """The Step suite on the default world (joined by the empty name, never created)."""

    join_name = ""


# -- a factory with a required argument -----------------------------------------------------------

class TestRequiredSettingCreateDestroyWorld(_Connected, compliance.CreateDestroyWorld):
    target = "required"
    required_world_settings = {"rows": servers.tensor(4)}
    invalid_world_settings = {"depth": servers.tensor(2), "seed": servers.tensor(True)}
    has_multiple_world_support = True


def test_the_suite_is_collected_in_full():
    """Every compliance method of every suite class runs here (none is silently lost)."""
    suites = {compliance.CreateDestroyWorld: 4, compliance.JoinLeaveWorld: 3, compliance.Reset: 3,
              compliance.ResetWorld: 3, compliance.Step: 4}     # each with Catch in worker processes too
    module = sys.modules[__name__]
    for suite, copies in suites.items():
        methods = {name for name in dir(suite) if name.startswith("test")}
        ours = [cls for name, cls in vars(module).items()
                if name.startswith("Test") and isinstance(cls, type) and issubclass(cls, suite)]
        assert len(ours) == copies, suite
        for cls in ours:
            assert methods <= {name for name in dir(cls) if name.startswith("test")}


# -- the real CLI in a subprocess ------------------------------------------------------------------

class _CliStep(compliance.Step):
    """The Step suite against a server given by address."""

    address = ""

    def setUp(self):
        super().setUp()
        self._client = servers.OfficialClient(self.address)
        self._specs = self._client.send(dpb.JoinWorldRequest(world_name="")).specs

    def tearDown(self):
        try:
            self._client.send(dpb.LeaveWorldRequest())
        finally:
            self._client.close()
        super().tearDown()

    @property
    def connection(self):
        return self._client.connection

    @property
    def specs(self):
        return self._specs


_CliStep.__test__ = False


def test_cli_subprocess_serves_compliant_cartpole():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "dmrpc_gym", "serve", "CartPole-v1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        match = re.search(r"serving CartPole-v1 on (\S+:\d+)$", line.strip())
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        _CliStep.address = match.group(1)
        names = ["test_requested_observations_are_returned", "test_cannot_send_action_above_max",
                 "test_cannot_send_wrong_numeric_type_action", "test_can_send_broadcastable_actions"]
        suite = unittest.TestSuite(_CliStep(name) for name in names)
        result = unittest.TextTestRunner(stream=open(os.devnull, "w")).run(suite)
        assert result.testsRun == len(names)
        assert result.wasSuccessful(), result.failures + result.errors
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_cli_refuses_an_unknown_env_id_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "dmrpc_gym", "serve", "CartPol-v1", "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0
    assert "CartPol-v1" in proc.stderr and "Traceback" not in proc.stderr


# -- the official compliance suite, envs in worker processes ----------------------------------------

_PROCESS_TARGET = "catch in processes"


def _process_server():
    if _PROCESS_TARGET not in _SERVERS:
        _SERVERS[_PROCESS_TARGET] = servers.start(Catch, processes=2)
    return _SERVERS[_PROCESS_TARGET]


class _InProcesses:
    target = _PROCESS_TARGET

    def setUp(self) -> None:
        _process_server()
        super().setUp()


class TestProcessesCatchCreateDestroyWorld(_InProcesses, TestCatchCreateDestroyWorld):
    pass


class TestProcessesCatchJoinLeaveWorld(_InProcesses, TestCatchJoinLeaveWorld):
    pass


class TestProcessesCatchReset(_InProcesses, TestCatchReset):
    pass


class TestProcessesCatchResetWorld(_InProcesses, TestCatchResetWorld):
    pass


class TestProcessesCatchStep(_InProcesses, TestCatchStep):
    pass
