"""How to install an optional part of dmrpc_gym (an extra of ``setup.cfg``), said the same everywhere.

dmrpc_gym is installed from its checkout (no package index has it), so the hint
names the checkout when this copy runs from one.

>>> install_hint("rllib").startswith("pip install ")
True
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["install_hint"]


def install_hint(extra: str) -> str:
    """The pip command that adds ``extra``: ``pip install -e "CHECKOUT[extra]"`` from a checkout
    (``.`` when it is the current directory), else ``pip install "dmrpc_gym[extra]"``."""
    root = Path(__file__).resolve().parent.parent
    if (root / "setup.cfg").is_file():
        where = "." if root == Path.cwd().resolve() else str(root)
        return f'pip install -e "{where}[{extra}]"'
    return f'pip install "dmrpc_gym[{extra}]"'
