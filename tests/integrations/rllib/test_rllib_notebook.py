"""notebooks/06_rllib.ipynb runs top to bottom in a fresh kernel of this (the RLlib) interpreter.

Its expected output is kept with the other notebooks' in tests/app/test_notebooks.py, whose
checks of the committed file run in the main suite; executing it needs ``ray[rllib]``.
"""
from __future__ import annotations

import os
import sys

import pytest
from rllib_support import ROOT, require_ray

require_ray()
if os.environ.get("DMRPC_REQUIRE_RAY") != "1":     # CI's RLlib stage installs them: there a failure
    pytest.importorskip("nbclient", reason="executing the notebook needs nbclient, ipykernel and matplotlib")
sys.path.insert(0, str(ROOT / "tests" / "support"))

from notebook_runs import NEEDS_RAY, run_and_check  # noqa: E402


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("name", sorted(NEEDS_RAY))
def test_rllib_notebook_runs(name, tmp_path):
    run_and_check(name, *NEEDS_RAY[name], tmp_path)
