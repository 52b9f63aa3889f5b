"""Hypothesis settings of the fuzz tests: derandomized, a fixed number of examples
(``DMRPC_FUZZ_EXAMPLES`` raises it), no deadline, no database; and ``both_paths``, the fixture that runs
a fuzz test with the steady-state step path off, then on."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("DMRPC_FUZZ_EXAMPLES", "0")) or None


def fuzz_settings(examples: int):
    return settings(max_examples=EXAMPLES or examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(params=["general", "steady"])
def both_paths(request, monkeypatch):
    """The steady-state step path off, then on (issue 32: ``DMRPC_STEADY_STEP``, read by each client agent
    and by each server connection as it starts); a module takes it for every test with
    ``pytestmark = pytest.mark.usefixtures("both_paths")``."""
    monkeypatch.setenv("DMRPC_STEADY_STEP", "1" if request.param == "steady" else "0")
    return request.param
