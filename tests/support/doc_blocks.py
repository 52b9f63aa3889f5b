"""Every code block of a Markdown document, run in order, and every output it shows compared with what its code prints.

One mechanism for README.md (``tests/app/test_readme.py``) and the site's pages under ``docs/``
(``tests/app/test_docs.py``). A document marks blocks with ``<!-- readme-test: KIND -->`` right
before them:
``serve`` (each line is a ``dmrpc-gym serve ... --port N``: started as the console
script with ``--port 0``; where the document says ``localhost:N`` the printed address is
used), ``run`` (each line is a ``dmrpc-gym`` command: it must exit 0), ``output`` (a
text block: exactly what the python block before it printed), ``skip`` (not run; a
reason is given). Python blocks run in one namespace per document, in order, as a reader
pastes them. A bash block with no marker is an error: every block is either run or says
why not. MyST directives (a fence whose language is ``{name}``, such as ``{toctree}``) are
not code and are left alone.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from console import Served, console

# A fence of three or more backticks, closed by the same run of backticks.
_FENCE = re.compile(r"^(```+)([^\n`]*)\n(.*?)^\1[ \t]*$", re.S | re.M)
_MARK = re.compile(r"<!--\s*(readme-test:\s*(\w+)[^>]*|test-command)\s*-->\s*$")
LANGUAGES = ("python", "bash", "text")


def needs_missing_godot(language: str, code: str) -> bool:
    """A python block that plays a Godot game, on a machine without the engine (CI installs it
    and sets DMRPC_REQUIRE_GODOT=1, so there it always runs)."""
    from dmrpc_gym.integrations.godot import godot_available
    return (language == "python" and "godot" in code.lower() and not godot_available()
            and os.environ.get("DMRPC_REQUIRE_GODOT") != "1")


def readme_blocks(text: str) -> list[tuple[str, str, str]]:
    """``(language, marker kind or '', code)`` of every fenced code block, in order (directives left out)."""
    blocks = []
    for match in _FENCE.finditer(text):
        language = match.group(2).strip()
        if language.startswith("{"):               # a MyST directive: {toctree}, {eval-rst}, {include}
            continue
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        kind = "" if mark is None else ("skip" if mark.group(1) == "test-command" else mark.group(2))
        blocks.append((language, kind, match.group(3)))
    return blocks


def _lines(code: str) -> list[str]:
    return [line.split(" #")[0].strip() for line in code.splitlines() if line.strip() and not line.startswith("#")]


def check_markers(path: Path) -> None:
    """Every block of ``path`` is of a known language, and every bash block says how it is treated."""
    for language, kind, code in readme_blocks(path.read_text()):
        assert language in LANGUAGES, f"{path.name}: a block of language {language!r}:\n{code}"
        if language == "bash":
            assert kind in ("serve", "run", "skip"), f"{path.name}: a bash block without a readme-test marker:\n{code}"
        if kind == "output":
            assert language == "text", f"{path.name}: an output block must be text:\n{code}"


@dataclass
class Ran:
    """What :func:`run_document` ran, by kind, and what the markers say it should have run."""
    ran: dict = field(default_factory=lambda: {"python": 0, "serve": 0, "run": 0, "output": 0})
    expected: dict = field(default_factory=lambda: {"python": 0, "serve": 0, "run": 0, "output": 0})


def run_document(path: Path, workdir: Path) -> Ran:
    """Run every block of ``path`` as its markers say, in ``workdir`` (the current directory must
    be ``workdir``: the caller chdirs), comparing each output block with what was printed."""
    blocks = readme_blocks(path.read_text())
    servers: list[Served] = []
    addresses: dict[str, str] = {}
    namespace: dict = {"__name__": "__readme__"}
    printed: str | None = None
    counts = Ran()
    ran = counts.ran

    def localize(text: str) -> str:
        for said, real in addresses.items():
            text = text.replace(said, real)
        return text
    try:
        for language, kind, code in blocks:
            if kind == "skip" or needs_missing_godot(language, code):
                continue
            if kind == "output":
                assert printed is not None, f"{path.name}: an output block follows no python block:\n{code}"
                assert printed == code, f"{path.name} shows\n{code}\nbut its code printed\n{printed}"
                ran["output"] += 1
                continue
            printed = None
            if language == "python":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(localize(code), str(path.name), "exec"), namespace)
                printed = out.getvalue()
                ran["python"] += 1
            elif kind == "serve":
                for line in _lines(code):
                    words = shlex.split(line)
                    assert words[:2] == ["dmrpc-gym", "serve"] and words[-2] == "--port", line
                    served = Served(words[2], workdir, *words[3:-2])
                    servers.append(served)
                    addresses[f"localhost:{words[-1]}"] = served.address
                    ran["serve"] += 1
            elif kind == "run":
                for line in _lines(code):
                    words = shlex.split(localize(line))
                    assert words[0] == "dmrpc-gym", line
                    result = console(*words[1:], cwd=workdir, timeout=300)
                    assert result.returncode == 0, f"{line}: {result.stderr}"
                    if "--json" in words:
                        json.loads(result.stdout)
                    ran["run"] += 1
    finally:
        for served in servers:
            served.stop()
    # Every block the markers say to run was run (none skipped by accident).
    for language, kind, code in blocks:
        if kind in ("serve", "run"):
            counts.expected[kind] += len(_lines(code))        # one per command line
        elif kind == "output":
            counts.expected[kind] += 1
        elif language == "python" and kind != "skip" and not needs_missing_godot(language, code):
            counts.expected["python"] += 1
    assert ran == counts.expected, (path.name, ran, counts.expected)
    return counts
