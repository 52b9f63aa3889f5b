"""Hypothesis settings of the fuzz tests: derandomized, a fixed number of examples
(``DMRPC_FUZZ_EXAMPLES`` raises it), no deadline, no database."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("DMRPC_FUZZ_EXAMPLES", "0")) or None


def fuzz_settings(examples: int):
    return settings(max_examples=EXAMPLES or examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
