"""Every code block of README.md, run in order, and every output it shows compared with what its code prints.

The mechanism (the ``<!-- readme-test: KIND -->`` markers: ``serve``, ``run``, ``output``,
``skip``) is :mod:`doc_blocks`, which runs the site's pages under ``docs/`` too
(``tests/test_docs.py``).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from doc_blocks import check_markers, run_document

README = Path(__file__).resolve().parent.parent / "README.md"

pytest.importorskip("stable_baselines3")
pytest.importorskip("supersuit")


def test_every_block_is_run_or_says_why_not():
    check_markers(README)


def test_readme_runs_in_order_and_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    counts = run_document(README, tmp_path)
    assert counts.ran["python"] >= 10 and counts.ran["serve"] >= 3
    assert (tmp_path / "catch.gif").stat().st_size > 0
