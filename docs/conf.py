"""Sphinx configuration of the dmrpc_gym site: Sphinx + MyST (Markdown pages) + furo.

Sphinx with MyST and furo is what the Farama Foundation (gymnasium, PettingZoo) builds its
sites with, so a gymnasium user finds the layout they know; autodoc renders the docstrings
this package already writes in reStructuredText (``:class:``, doctests) as they are, and
sphinx-argparse renders the CLI reference from the parsers themselves.

Build: ``pip install -e ".[docs]"`` then ``python -m sphinx -W -n --keep-going -b html docs docs/_build/html``
(warnings are errors; ``-n`` reports every reference that resolves nowhere). No network is needed.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))
os.environ.setdefault("MUJOCO_GL", "egl")

from dmrpc_gym import __version__  # noqa: E402

project = "dmrpc_gym"
author = "dmrpc_gym contributors"
copyright = "dmrpc_gym contributors"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinxarg.ext",
    "public_api",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True, "member-order": "bysource"}
autodoc_typehints = "description"
autodoc_inherit_docstrings = False      # gymnasium's and dm_env's own docstrings are theirs to render
autodoc_typehints_format = "short"
# The optional libraries an integration imports are mocked where they are not installed, so that
# the docs extra alone builds the site (Ray pins an older gymnasium and lives in a venv of its own).
autodoc_mock_imports = [name for name in ("ray", "stable_baselines3", "torch", "websockets", "PIL", "supersuit")
                        if importlib.util.find_spec(name) is None]
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# -n (nitpicky): every cross-reference must resolve. References into other projects (numpy,
# gymnasium, grpc...) would need their inventories from the network (intersphinx): they are
# left as plain text instead, and only references into dmrpc_gym are checked.
nitpicky = True
# Inside dmrpc_gym, the internal modules are listed with their docstrings (reference/api/internals)
# but their classes and functions are not API: a docstring's reference to one stays plain text.
from public_api import internal_modules  # noqa: E402

nitpick_ignore_regex = [
    (r"py:.*", r"(?!dmrpc_gym\b)[A-Za-z_][\w.]*"),   # any name outside dmrpc_gym
    (r"py:.*", r"dmrpc_gym\.protocol\._proto\..*"),   # generated protobuf messages
    (r"py:(class|func|meth|attr|data|obj|exc)",
     r"(%s)\.\w+(\.\w+)?" % "|".join(m.replace(".", r"\.") for m in internal_modules())),
]

html_theme = "furo"
html_title = f"dmrpc_gym {release}"
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"
html_theme_options = {"source_edit_link": None, "navigation_with_keys": True}
