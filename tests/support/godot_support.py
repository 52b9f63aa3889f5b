"""Helpers for the Godot tests: skip (or fail, under DMRPC_REQUIRE_GODOT=1) without an engine; find leftover games."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from dmrpc_gym.integrations.godot import find_godot, godot_available

FAULTS_PROJECT = Path(__file__).resolve().parent / "godot_faults"
CATCH_OBS = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
#: Names of the processes a game run consists of (the engine builds, and xvfb-run / Xvfb for drawing).
GAME_NAMES = ("godot", "xvfb-run", "Xvfb")


def require_godot() -> None:
    """Skip the calling test module without a Godot engine; fail instead under DMRPC_REQUIRE_GODOT=1."""
    if godot_available():
        return
    reason = "no Godot engine (apt-get install godot3-server) or no websockets"
    if os.environ.get("DMRPC_REQUIRE_GODOT") == "1":
        pytest.fail(f"DMRPC_REQUIRE_GODOT=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def drawing_godot() -> list[str] | None:
    """A command that runs a Godot build able to draw (godot3 under xvfb-run), or None."""
    godot, xvfb = shutil.which("godot3"), shutil.which("xvfb-run")
    if not godot or not (xvfb or os.environ.get("DISPLAY")):
        return None
    return [xvfb, "-a", godot] if not os.environ.get("DISPLAY") else [godot]


def headless_godot() -> list[str]:
    return find_godot("godot3-server") if shutil.which("godot3-server") else find_godot()


def _stat(pid: str) -> tuple[int, str, str] | None:
    """(ppid, state, name) of a process from /proc, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), fields[0], name


def live_games() -> list[tuple[int, str]]:
    """Every live (not zombie) game process descended from this process: (pid, name)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None:
                table[int(entry)] = stat
    mine, found = {os.getpid()}, True
    while found:                       # grow the set of descendants to a fixed point
        found = False
        for pid, (ppid, _, _) in table.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                found = True
    return sorted((pid, name) for pid, (_, state, name) in table.items()
                  if pid in mine and state != "Z" and any(n in name for n in GAME_NAMES))


@pytest.fixture(scope="module", autouse=False)
def no_games_left():
    """Module fixture: after the module's tests, no game process of ours is left running."""
    yield
    left = live_games()
    assert not left, f"game processes left running after the tests: {left}"
