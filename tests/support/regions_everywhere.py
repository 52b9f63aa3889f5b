"""A pytest plugin (``-p regions_everywhere``): every fixed-size tensor of 16 bytes or more goes through the
shared-memory regions, not only those of ``THRESHOLD`` (16 KiB) and more.

``.ci/run`` runs the fidelity suite with it (issue 40: values bit-identical with the regions on), so that
CartPole's observation, a Box action and the small images of the suite take the regions, where by default
only large tensors do. So that the stage cannot pass by never using them, the session fails if no
connection of it had its region on.
"""
from __future__ import annotations

import pytest

LOW = 16
_used = []


def pytest_configure(config: pytest.Config) -> None:
    from dmrpc_gym.transport import shared_memory

    shared_memory.THRESHOLD = LOW
    plan = shared_memory.RegionLink.plan

    def counted(self, *args, **kwargs):
        out = plan(self, *args, **kwargs)
        if self.state == "on":
            _used.append(1)
        return out

    shared_memory.RegionLink.plan = counted


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus == 0 and session.testscollected and not _used:
        session.exitstatus = 1
        print(f"\nregions_everywhere: no connection used shared memory (threshold {LOW} bytes)")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    terminalreporter.write_line(f"regions_everywhere: {len(_used)} connections had their shared-memory region on")
