"""The docs site (``docs/``): every code block of every page runs (the README's mechanism,
:mod:`doc_blocks`), the site builds with warnings as errors and every cross-reference
resolved (``sphinx -W -n``), no internal link or image of the built site points nowhere, and
the API reference covers every public name.

Building needs the ``docs`` extra (``pip install -e ".[docs]"``; the ``test`` extra has it).
"""
from __future__ import annotations

import html.parser
import importlib
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from doc_blocks import check_markers, readme_blocks, run_document

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
RUNNABLE = [p for p in PAGES if any(kind != "skip" and language != "text" for language, kind, _ in readme_blocks(p.read_text()))]


def _name(path: Path) -> str:
    return str(path.relative_to(DOCS))


def test_every_block_of_every_page_is_run_or_says_why_not():
    assert len(PAGES) >= 20
    for page in PAGES:
        check_markers(page)


@pytest.mark.parametrize("page", RUNNABLE, ids=_name)
def test_page_runs_in_order_and_prints_what_it_shows(page, tmp_path, monkeypatch):
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("supersuit")
    monkeypatch.chdir(tmp_path)
    run_document(page, tmp_path)


# -- the built site ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "sphinx", "-E", "-W", "-n", "--keep-going", "-q",
                             "-b", "html", str(DOCS), str(out)], capture_output=True, text=True, timeout=600,
                            cwd=ROOT)
    assert result.returncode == 0, f"the site does not build cleanly:\n{result.stderr[-6000:]}"
    return out


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []     # (tag, url)
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append((tag, attrs["href"]))
        elif tag == "img" and attrs.get("src"):
            self.links.append((tag, attrs["src"]))
        elif tag == "link" and attrs.get("rel") == "stylesheet":
            self.links.append((tag, attrs["href"]))


def test_the_site_builds_with_warnings_as_errors(site):
    assert (site / "index.html").is_file() and (site / "searchindex.js").is_file()


def test_no_internal_link_of_the_site_points_nowhere(site):
    parsed: dict[Path, _Links] = {}

    def parse(path: Path) -> _Links:
        if path not in parsed:
            parser = _Links()
            parser.feed(path.read_text(errors="replace"))
            parsed[path] = parser
        return parsed[path]
    broken = []
    for page in sorted(site.rglob("*.html")):
        if "_modules" in page.parts:            # viewcode's source pages
            continue
        for tag, url in parse(page).links:
            parts = urlsplit(url)
            if parts.scheme or url.startswith(("//", "mailto:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {tag} {url} (no file)")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in parse(target).ids:
                broken.append(f"{page.relative_to(site)}: {tag} {url} (no anchor)")
    assert not broken, "\n".join(broken)


def test_the_api_reference_covers_every_public_name(site):
    from sphinx.util.inventory import InventoryFile
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        public_api = importlib.import_module("public_api")
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    with open(site / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    documented = {name for entries in inventory.data.values() for name in entries} \
        if hasattr(inventory, "data") else {name for entries in inventory.values() for name in entries}
    missing = []
    for module_name in public_api.PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        assert module_name in documented, module_name
        for name in public_api.public_names(module_name):
            obj = getattr(module, name)
            candidates = {f"{module_name}.{name}", f"{getattr(obj, '__module__', '')}.{name}"}
            candidates |= {f"{m}.{name}" for m in public_api.PUBLIC_MODULES}
            candidates |= {f"{public_api._home(module_name, name, obj)}.{name}"}
            if not candidates & documented:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public names the API reference leaves out: {missing}"


def test_the_docs_extra_builds_the_site():
    import configparser
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = config["options.extras_require"]
    for package in ("sphinx", "myst-parser", "furo", "sphinx-argparse"):
        assert package in extras["docs"], package
    assert "docs" in extras["test"]


def test_the_cli_reference_has_every_command_and_option(site):
    """The CLI reference is rendered from the parsers themselves: every subcommand and every option string is on it."""
    import argparse

    from dmrpc_gym.app.cli import build_parser
    import html as html_text
    import re
    page = html_text.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / "cli.html").read_text()))
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in subparsers.choices.items():
        assert f"dmrpc-gym {name} [-h]" in page, name                     # its usage line
        for action in parser._actions:
            for option in action.option_strings:
                assert option in page, f"{name} {option}"
    assert "dmrpc-gym serve dm_control/cartpole-balance" in page       # serve's kinds of target
