"""Results files of the benchmarks: a script's section of a markdown file, and the commit it measured.

A script rewrites only its own section, between ``<!-- name -->`` markers, so that several
scripts (and hand-written notes) share one file.
"""
from __future__ import annotations

import os
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def commit() -> str:
    """The checkout's commit, and whether dmrpc_gym/ has changes not committed."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "dmrpc_gym")
    return git("rev-parse", "--short", "HEAD") + (" + uncommitted changes in dmrpc_gym/" if dirty else "")


def write_section(path: str, name: str, text: str, title: str) -> None:
    """Put ``text`` into the markdown file ``path`` between the ``<!-- name -->`` markers (added at the
    end when missing; a new file starts with ``title``), keeping everything else."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    old = open(path).read() if os.path.exists(path) else f"# {title}\n"
    if begin not in old:
        old = old.rstrip("\n") + f"\n\n{begin}\n{end}\n"
    new = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{text}{end}", old, flags=re.S)
    with open(path, "w") as f:
        f.write(new)
