"""Fixtures of the transport tests."""
from __future__ import annotations

import pytest
import servers
from hostile import Slow


@pytest.fixture
def slow_server():
    server = servers.start(Slow)
    yield server
    server.stop()
