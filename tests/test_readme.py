"""Every code block of README.md, run in order, and every output it shows compared with what its code prints.

The README marks blocks with ``<!-- readme-test: KIND -->`` right before them:
``serve`` (each line is a ``dmrpc-gym serve ... --port N``: started as the console
script with ``--port 0``; where the README says ``localhost:N`` the printed address is
used), ``run`` (each line is a ``dmrpc-gym`` command: it must exit 0), ``output`` (a
text block: exactly what the python block before it printed), ``skip`` (not run; a
reason is given). Python blocks run in one namespace, in order, as a reader pastes them.
A bash block with no marker is an error: every block is either run or says why not.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from test_ux_cli import Served, console

README = Path(__file__).resolve().parent.parent / "README.md"

pytest.importorskip("stable_baselines3")
pytest.importorskip("supersuit")

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_MARK = re.compile(r"<!--\s*(readme-test:\s*(\w+)[^>]*|test-command)\s*-->\s*$")


def _needs_missing_godot(language: str, code: str) -> bool:
    """A python block that plays a Godot game, on a machine without the engine (CI installs it
    and sets DMRPC_REQUIRE_GODOT=1, so there it always runs)."""
    from dmrpc_gym.integrations.godot import godot_available
    return (language == "python" and "godot" in code.lower() and not godot_available()
            and os.environ.get("DMRPC_REQUIRE_GODOT") != "1")


def readme_blocks(text: str) -> list[tuple[str, str, str]]:
    """``(language, marker kind or '', code)`` of every fenced block, in order."""
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        kind = "" if mark is None else ("skip" if mark.group(1) == "test-command" else mark.group(2))
        blocks.append((match.group(1), kind, match.group(2)))
    return blocks


def _lines(code: str) -> list[str]:
    return [line.split(" #")[0].strip() for line in code.splitlines() if line.strip() and not line.startswith("#")]


def test_every_block_is_run_or_says_why_not():
    for language, kind, code in readme_blocks(README.read_text()):
        assert language in ("python", "bash", "text"), f"block of language {language!r}:\n{code}"
        if language == "bash":
            assert kind in ("serve", "run", "skip"), f"a bash block without a readme-test marker:\n{code}"
        if kind == "output":
            assert language == "text"


def test_readme_runs_in_order_and_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = readme_blocks(README.read_text())
    servers: list[Served] = []
    addresses: dict[str, str] = {}
    namespace: dict = {"__name__": "__readme__"}
    printed: str | None = None
    ran = {"python": 0, "serve": 0, "run": 0, "output": 0}

    def localize(text: str) -> str:
        for said, real in addresses.items():
            text = text.replace(said, real)
        return text
    try:
        for language, kind, code in blocks:
            if kind == "skip" or _needs_missing_godot(language, code):
                continue
            if kind == "output":
                assert printed is not None, f"an output block follows no python block:\n{code}"
                assert printed == code, f"the README shows\n{code}\nbut its code printed\n{printed}"
                ran["output"] += 1
                continue
            printed = None
            if language == "python":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(localize(code), "README.md", "exec"), namespace)
                printed = out.getvalue()
                ran["python"] += 1
            elif kind == "serve":
                for line in _lines(code):
                    words = shlex.split(line)
                    assert words[:2] == ["dmrpc-gym", "serve"] and words[-2] == "--port", line
                    served = Served(words[2], tmp_path, *words[3:-2])
                    servers.append(served)
                    addresses[f"localhost:{words[-1]}"] = served.address
                    ran["serve"] += 1
            elif kind == "run":
                for line in _lines(code):
                    words = shlex.split(localize(line))
                    assert words[0] == "dmrpc-gym", line
                    result = console(*words[1:], cwd=tmp_path, timeout=300)
                    assert result.returncode == 0, f"{line}: {result.stderr}"
                    if "--json" in words:
                        json.loads(result.stdout)
                    ran["run"] += 1
    finally:
        for served in servers:
            served.stop()
    # Every block the markers say to run was run (none skipped by accident).
    expected = {"python": 0, "serve": 0, "run": 0, "output": 0}
    for language, kind, code in blocks:
        if kind in ("serve", "run"):
            expected[kind] += len(_lines(code))        # one per command line
        elif kind == "output":
            expected[kind] += 1
        elif language == "python" and kind != "skip" and not _needs_missing_godot(language, code):
            expected["python"] += 1
    assert ran == expected and ran["python"] >= 10 and ran["serve"] >= 3
    assert (tmp_path / "catch.gif").stat().st_size > 0
