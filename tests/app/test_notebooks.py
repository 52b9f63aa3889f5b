"""The notebooks in notebooks/ run top to bottom in a fresh kernel, and are committed with outputs.

Each notebook is executed with nbclient on a kernel of this interpreter (see
:func:`test_jupyter.kernel_manager`); a failing cell fails the test with the
cell's traceback. The checks then look for what each notebook is there to show.
"""
from __future__ import annotations


import nbformat
import pytest

from notebook_runs import NEEDS_RAY, NOTEBOOKS, outputs, run_and_check

#: Notebook -> (seconds a cell may take, patterns its stdout must contain).
EXPECTED = {
    "01_quickstart.ipynb": (60, [
        r"action space:\s+Discrete\(3, start=-1, dtype=int8\)",
        r"9 steps, rewards \[.*\], final state TERMINATED",
        r"mean reward, random actions: [+-]\d\.\d\d",
        r"mean reward, chase policy:\s+\+1\.00",
        r"seed\s+\d+",
    ]),
    "02_train_sb3.ipynb": (240, [
        r"observation space: Box\(0\.0, 1\.0, \(100,\), float32\)",
        r"mean reward before training: [+-]\d\.\d\d",
        r"mean reward after training:\s+[+-]\d\.\d\d",
        r"\d+ training episodes",
        r"episode return: [+-]1",
    ]),
    "03_multi_agent.ipynb": (90, [
        r"agents: \['pursuer_0', 'pursuer_1', 'evader_0', 'evader_1'\]",
        r"evader_0\s+return [+-]\d\.\d\d, (terminated|truncated) after \d+ steps",
        r"chasing pursuers\s+pursuer_0 [+-]\d\.\d\d",
        r"6 slots \(2 copies x 3 agents\), observations \(6, 10\)",
    ]),
    "04_serve_your_env.ipynb": (60, [
        r"serving __main__:Corridor on 127\.0\.0\.1:\d+",
        r"observation space: Dict\('position': Box\(0\.0, 1\.0, \(1,\), float32\), 'steps_left': Discrete\(41\)\)",
        r"steps_left\s+int64\s+\(\)\s+\[0, 40\]\s+Discrete\(41\)",
        r"after writing seed=3, the first position is",
        r"reward \+1\.10\s+discount 0\.0",
        r"random CartPole episode: return \d+ in \d+ steps",
        r"returns: \{'pursuer_0'",
        r"sync: \d+ env steps/s; async batches of 4: \d+ env steps/s \(\d+\.\dx\)",
    ]),
    "05_godot.ipynb": (120, [
        r"mean return, random paddle: [+-]\d\.\d\d",
        r"mean return, chasing paddle: \+1\.00",
        r"mean return, PPO after 4096 steps: [+-]\d\.\d\d",
        r"vector observations \(4, 3\)",
        r"served episode: 15 steps, reward [+-]1\.0",
    ]),
    "07_dm_env.ipynb": (120, [
        r"serving on 127\.0\.0\.1:\d+",
        r"observation spec: \{'position': \(\(3,\), 'float64'\), 'velocity': \(\(2,\), 'float64'\)\}",
        r"action spec: BoundedArray\(shape=\(1,\), dtype=dtype\('float64'\), name=None, minimum=\[-1\.\], maximum=\[1\.\]\)",
        r"episode: 200 steps, return \d+\.\d, last discount 1\.0",
        r"mean return before training: \d+\.\d",
        r"mean return after 8192 steps: \d+\.\d",
    ]),
}
#: Notebooks that run a Godot engine: skipped without one (a failure under DMRPC_REQUIRE_GODOT=1).
NEEDS_GODOT = {"05_godot.ipynb"}



def test_every_notebook_is_checked():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted({**EXPECTED, **NEEDS_RAY})


@pytest.mark.parametrize("name", sorted({**EXPECTED, **NEEDS_RAY}))
def test_notebook_is_committed_with_outputs(name):
    """What a repository page shows: every code cell ran, in order, and the plots are there."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    counts = [cell.execution_count for cell in nb.cells if cell.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), f"{name}: run it top to bottom in a fresh kernel and save"
    assert not outputs(nb, "error")
    assert any("image/png" in o.get("data", {}) for o in outputs(nb, "display_data|execute_result"))
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.timeout(290)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs(name, tmp_path):
    """Execute the notebook in a fresh kernel: no error, no traceback on stderr, the expected output."""
    if name in NEEDS_GODOT:
        from godot_support import require_godot
        require_godot()
    run_and_check(name, *EXPECTED[name], tmp_path)


