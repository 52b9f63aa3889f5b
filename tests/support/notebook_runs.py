"""Notebooks of notebooks/ run top to bottom in a fresh kernel and their output checked (shared by the
notebook tests of the main suite and of the RLlib venv)."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

from kernels import notebook_client, stream_text

__all__ = ["NOTEBOOKS", "NEEDS_RAY", "outputs", "run_and_check"]

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

#: Notebooks that need ``ray[rllib]`` (its own venv: it pins gymnasium): run by tests/integrations/rllib.
NEEDS_RAY = {
    "06_rllib.ipynb": (900, [
        r"registered: \['dmrpc/Remote-v0', 'dmrpc/Catch-v0', 'dmrpc/Tag-v0', 'dmrpc/Godot-v0'\]",
        r"iteration  1: mean episode return -[01]\.\d\d",
        r"(?m)iteration +\d+: mean episode return \+0\.[6-9]\d$",   # learned: above 0.6 within 25
        r"policy pursuer: [1-9]\d* module steps trained",
        r"policy evader: [1-9]\d* module steps trained",
        r"agents sampled: \['evader_0', 'evader_1', 'pursuer_0', 'pursuer_1'\]",
        r"cluster nodes: 1 \| CPUs: 2\.0",
        r"worlds on a: 3, worlds on b: 1",
    ]),
}


def outputs(nb: nbformat.NotebookNode, kind: str) -> list:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", ())
            if o.get("output_type") in kind.split("|")]


def run_and_check(name: str, cell_timeout: float, patterns: list[str], tmp_path: Path) -> None:
    """Execute ``name`` in a fresh kernel of this interpreter and check its output against ``patterns``."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    notebook_client(nb, tmp_path, timeout=cell_timeout).execute()
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert not outputs(nb, "error")
    stdout = "".join(stream_text(cell) for cell in code)
    stderr = "".join(stream_text(cell, "stderr") for cell in code)
    assert "Traceback" not in stderr, stderr
    for pattern in patterns:
        assert re.search(pattern, stdout), f"{name}: no output matching {pattern!r} in\n{stdout}"
    assert any("image/png" in o.get("data", {}) for o in outputs(nb, "display_data|execute_result"))
