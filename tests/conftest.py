"""Shared by every test folder: the helper modules of ``tests/support/`` import by their names
(``import servers``, ``from raw_h2 import RawClient``) from any folder below ``tests/``."""
from __future__ import annotations

import os
import sys

import pytest

_SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
if _SUPPORT not in sys.path:
    sys.path.insert(0, _SUPPORT)


@pytest.fixture
def not_in_a_kernel(monkeypatch):
    """The steady paths step aside in a Jupyter kernel (its reads hold Ctrl-C back there), and a kernel is
    told by ipykernel in ``sys.modules``, which tests that ran earlier in this process may have imported."""
    from dmrpc_gym.transport.client import interrupts
    monkeypatch.setattr(interrupts, "in_kernel", lambda: False)
