"""It works inside Jupyter: a running event loop, re-run cells, interrupted steps.

The kernel tests start a real IPython kernel (``ipykernel``) of this very
interpreter, through a kernelspec written to a temporary directory (so no
user-installed ``python3`` kernel of another Python can be picked up), and
talk to it with ``jupyter_client`` / ``nbclient`` as Jupyter itself does.
"""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import nbformat
import numpy as np
import pytest
from gymnasium import spaces

from kernels import KERNEL_READY_TIMEOUT, kernel_manager, notebook_client, stream_text

from dmrpc_gym.worlds.embedded import embedded_server
from dmrpc_gym.server import Server

class Kernel:
    """A started kernel and its client; ``run(code)`` executes a cell and returns its output."""

    def __init__(self, directory: Path):
        self.manager = kernel_manager(directory)
        self.manager.start_kernel(cwd=str(directory))
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=KERNEL_READY_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def run(self, code: str, timeout: float = 30.0) -> tuple[dict, str]:
        """Execute ``code``: ``(reply content, stdout text)``; the reply says ok/error (``ename``).

        Right after a cell failed, ipykernel answers requests ``aborted`` for a
        moment (it drops what was queued behind the failure): then ask again, as
        a user would re-run the cell.
        """
        for _ in range(20):
            out: list[str] = []

            def keep(msg: dict) -> None:
                if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                    out.append(msg["content"]["text"])
            reply = self.client.execute_interactive(code, timeout=timeout, output_hook=keep)
            if reply["content"]["status"] != "aborted":
                break
            threading.Event().wait(0.1)
        return reply["content"], "".join(out)

    def ok(self, code: str, timeout: float = 30.0) -> str:
        """Execute ``code``, which must succeed; its stdout."""
        content, out = self.run(code, timeout)
        assert content["status"] == "ok", f"{content.get('ename')}: {content.get('evalue')}\n{code}"
        return out

    def reply_to(self, msg_id: str, timeout: float) -> dict:
        """The execute reply to ``msg_id`` (skipping replies to earlier requests)."""
        while True:
            msg = self.client.get_shell_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(tmp_path)
    yield k
    k.close()


# -- (a) inside a running event loop -------------------------------------------------------------

def test_catch_in_a_running_event_loop():
    """Jupyter runs cells while an asyncio loop runs in the main thread: the blocking API still works."""
    async def cell() -> tuple[bool, tuple]:
        running = asyncio.get_running_loop().is_running()
        env = gym.make("dmrpc/Catch-v0")
        try:
            obs, info = env.reset(seed=0)
            obs, reward, terminated, truncated, info = env.step(np.int8(1))
            await asyncio.sleep(0)   # the loop keeps turning between steps
            return running, (obs.shape, type(reward), env.unwrapped.state.name)
        finally:
            env.close()
    running, result = asyncio.run(cell())
    assert running
    assert result == ((10, 10), float, "RUNNING")


def test_catch_in_a_notebook_cell(tmp_path):
    """A real ipykernel (via nbclient): the cell runs inside the kernel's running loop and steps Catch."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import asyncio, gymnasium as gym, dmrpc_gym\n"
        "print('loop running:', asyncio.get_event_loop().is_running())\n"
        "env = gym.make('dmrpc/Catch-v0')\n"
        "obs, info = env.reset(seed=0)\n"
        "total = 0.0\n"
        "while True:\n"
        "    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())\n"
        "    total += reward\n"
        "    if terminated or truncated:\n"
        "        break\n"
        "print('episode over:', env.unwrapped.state.name, total in (-1.0, 1.0))\n"
        "env.close()\n")]
    notebook_client(nb, tmp_path, timeout=60).execute()
    out = stream_text(nb.cells[0])
    assert "loop running: True" in out
    assert "episode over: TERMINATED True" in out


# -- (b) re-running a cell that makes an env -------------------------------------------------------

def test_making_catch_twice_without_close():
    """Two live Catch envs in one process share the one embedded server and both step."""
    first = gym.make("dmrpc/Catch-v0")
    second = gym.make("dmrpc/Catch-v0")
    try:
        assert first.unwrapped.connection.address == second.unwrapped.connection.address \
            == embedded_server("catch").address
        assert first.unwrapped.world_name != second.unwrapped.world_name
        for env in (first, second):
            obs, info = env.reset(seed=4)
            obs, reward, terminated, truncated, info = env.step(np.int8(0))
            assert obs.shape == (10, 10) and env.unwrapped.state.name == "RUNNING"
    finally:
        first.close()
        second.close()


RERUN_CELL = """\
import threading, gymnasium as gym, dmrpc_gym
env = gym.make("dmrpc/Catch-v0")
made.append(env)                      # keep every env alive: none is closed
obs, info = env.reset(seed=len(made))
obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
servers = [t.name for t in threading.enumerate() if t.name.startswith("dmrpc-gym-server")]
print(len(made), env.unwrapped.connection.address, env.unwrapped.state.name, len(servers))
"""


def test_rerunning_a_cell_that_makes_catch(tmp_path):
    """Running the same cell three times in a real kernel: no port clash, no hang, one server."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("made = []"), nbformat.v4.new_code_cell(RERUN_CELL),
                nbformat.v4.new_code_cell(
                    "for e in made:\n"
                    "    e.step(e.action_space.sample())\n"
                    "print('all stepped', len({e.unwrapped.world_name for e in made}))\n")]
    client = notebook_client(nb, tmp_path, timeout=60)
    lines = []
    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)
        for _ in range(3):
            nb.cells[1].outputs = []
            client.execute_cell(nb.cells[1], 1)
            lines.append(stream_text(nb.cells[1]).split())
        client.execute_cell(nb.cells[2], 2)
    assert [line[0] for line in lines] == ["1", "2", "3"]
    assert len({line[1] for line in lines}) == 1            # the same embedded server every time
    assert all(line[2] == "RUNNING" and line[3] == "1" for line in lines)   # one server thread
    assert stream_text(nb.cells[2]).split() == ["all", "stepped", "3"]


# -- (c) interrupting a step -------------------------------------------------------------------------

class HeldStep(gym.Env):
    """Action 1 holds the step until the test releases it (at most 5 s); action 0 answers at once."""

    observation_space = spaces.Box(0.0, 1000.0, (1,), np.float32)
    action_space = spaces.Discrete(2)
    started = threading.Event()
    release = threading.Event()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any):
        if int(action) == 1:
            HeldStep.started.set()
            HeldStep.release.wait(5.0)
        self.steps += 1
        return np.full(1, self.steps, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("wait", [0.0, 0.5], ids=["at-once", "after-a-while"])
def test_interrupting_a_step_in_a_kernel(tmp_path, kernel, wait):
    """Interrupt a cell blocked in ``env.step``: the next step works, or fails clearly as unusable.

    ``at-once`` interrupts as soon as the server has the step, when the client
    may still be finishing its send; ``after-a-while`` when it surely waits for the answer.
    """
    HeldStep.started.clear()
    HeldStep.release.clear()
    with Server(HeldStep) as server:
        # step_timeout: should the next step hang, the cell says where (TimeoutError), not the kernel's silence
        kernel.ok("import gymnasium as gym, dmrpc_gym\n"
                  f"env = gym.make('dmrpc/Remote-v0', address={server.address!r}, step_timeout=10)\n"
                  "obs, info = env.reset()\n")
        msg_id = kernel.client.execute("env.step(1)")
        assert HeldStep.started.wait(10.0), "the held step never reached the server"
        threading.Event().wait(wait)         # the user waits a little, then presses interrupt
        kernel.manager.interrupt_kernel()
        interrupted = kernel.reply_to(msg_id, timeout=10.0)
        HeldStep.release.set()
        assert interrupted["status"] == "error" and interrupted["ename"] == "KeyboardInterrupt"

        content, out = kernel.run(
            "try:\n"
            "    obs, reward, terminated, truncated, info = env.step(0)\n"
            "    print('usable', int(obs[0]), env.unwrapped.state.name)\n"
            "except (ConnectionError, RuntimeError) as err:\n"
            "    print('unusable', type(err).__name__, err)\n", timeout=15.0)
        assert content["status"] == "ok", f"{content.get('ename')}: {content.get('evalue')}"
        print("after the interrupt:", out)
        if out.startswith("usable"):
            # The interrupted step did happen on the server (step 1); its late answer was
            # dropped, and this step is step 2.
            assert out.split() == ["usable", "2", "RUNNING"]
        else:
            assert "unusable" in out or "closed" in out, out
        # Either way, close() returns and a new env in the same kernel works.
        out = kernel.ok("env.close()\n"
                        f"env = gym.make('dmrpc/Remote-v0', address={server.address!r})\n"
                        "env.reset()\n"
                        "print(env.step(0)[0])\n"
                        "env.close()\n", timeout=15.0)
        assert out.strip() == "[1.]"
