"""Every code block of README.md, run in order, and every output it shows compared with what its code prints.

The mechanism (the ``<!-- readme-test: KIND -->`` markers: ``serve``, ``run``, ``output``,
``skip``) is :mod:`doc_blocks`, which runs the site's pages under ``docs/`` too
(``tests/app/test_docs.py``).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from doc_blocks import check_markers, readme_blocks, run_document

README = Path(__file__).resolve().parents[2] / "README.md"

pytest.importorskip("stable_baselines3")
pytest.importorskip("supersuit")


def test_every_block_is_run_or_says_why_not():
    check_markers(README)


def test_readme_runs_in_order_and_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    counts = run_document(README, tmp_path)
    assert counts.ran["python"] >= 1 and counts.ran["serve"] >= 1 and counts.ran["output"] >= 1
    assert (tmp_path / "catch.gif").stat().st_size > 0


def test_the_readme_is_a_front_page_that_opens_with_its_two_commands():
    """Issue 33: under 250 lines; the install-and-demo command and CI's test command come first."""
    text = README.read_text()
    assert len(text.splitlines()) < 250
    blocks = readme_blocks(text)
    assert "dmrpc-gym demo" in blocks[0][2] and "pip install" in blocks[0][2]
    assert blocks[1][2].startswith("pip install torch==") and "python -m pytest" in blocks[1][2]
    assert text.index("<!-- test-command -->") < text.index(blocks[1][2])
