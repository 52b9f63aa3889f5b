"""A Jupyter kernel of this very interpreter, and notebooks run on it with nbclient (shared by the Jupyter
and notebook tests).

The kernelspec lives in a temporary directory, so no user-installed ``python3`` kernel of another
Python can be picked up; ``jupyter_client`` / ``nbclient`` talk to it as Jupyter itself does.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

__all__ = ["KERNEL_READY_TIMEOUT", "kernel_manager", "notebook_client", "stream_text"]

KERNEL_READY_TIMEOUT = 60.0


# -- a kernel of this interpreter ------------------------------------------------------------

def kernel_manager(directory: Path) -> KernelManager:
    """A (not yet started) manager of a ``python3`` kernel running ``sys.executable``.

    The kernelspec lives in ``directory``; a spec manager that looks only there
    makes the kernel this interpreter whatever other kernels are installed.
    """
    spec = directory / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} (tests)",
        "language": "python",
        "interrupt_mode": "signal",
    }))
    specs = KernelSpecManager(kernel_dirs=[str(spec.parent)])
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def notebook_client(nb: nbformat.NotebookNode, directory: Path, timeout: float) -> NotebookClient:
    """An nbclient runner of ``nb`` on this interpreter's kernel, working in ``directory``."""
    return NotebookClient(nb, km=kernel_manager(directory), timeout=timeout,
                          startup_timeout=KERNEL_READY_TIMEOUT, kernel_name="python3",
                          resources={"metadata": {"path": str(directory)}})


def stream_text(cell: nbformat.NotebookNode, name: str = "stdout") -> str:
    """All ``name`` stream output of an executed cell."""
    return "".join(o.get("text", "") for o in cell.get("outputs", ())
                   if o.get("output_type") == "stream" and o.get("name") == name)
