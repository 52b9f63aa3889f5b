"""The API reference, generated from the public names at every build, so that it cannot drift.

One page per public module (:data:`PUBLIC_MODULES`): the module's docstring, then each name
of its ``__all__`` rendered by autodoc from its docstring. An object is documented once, on
the first page that lists it (``DmRpcEnv`` as ``dmrpc_gym.DmRpcEnv``; its home module's path
stays a valid reference through autodoc's ``:canonical:``). The pages are written to
``docs/reference/api/`` (not committed) when the build starts.
"""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

#: Module -> one line saying what it holds, in the order of the reference's contents.
PUBLIC_MODULES: dict[str, str] = {
    "dmrpc_gym": "the package: the names most programs need",
    "dmrpc_gym.server": "serve gymnasium, PettingZoo and dm_env environments over dm_env_rpc",
    "dmrpc_gym.client.env": "DmRpcEnv, a dm_env_rpc world as a gymnasium env",
    "dmrpc_gym.client.vector": "DmRpcVectorEnv, N worlds as one gymnasium vector env",
    "dmrpc_gym.client.parallel": "DmRpcParallelEnv, a multi-agent world as a PettingZoo ParallelEnv",
    "dmrpc_gym.client.aec": "DmRpcAECEnv, a turn-based world as a PettingZoo AECEnv",
    "dmrpc_gym.client.dm_env_client": "connect_dm_env, a world as a dm_env.Environment",
    "dmrpc_gym.client.connection": "Connection, one dm_env_rpc stream",
    "dmrpc_gym.client.agent": "the world states and reward callables",
    "dmrpc_gym.client.properties": "the properties extension as a dict-like view",
    "dmrpc_gym.integrations.flat_spaces": "FlatSpaces, the flat-spaces view SB3 and RLlib train on",
    "dmrpc_gym.integrations.sb3": "Stable-Baselines3: FlatSpaces and a VecEnv without subprocesses",
    "dmrpc_gym.integrations.rllib": "Ray RLlib: env names, servers spread over env runners, multi-agent",
    "dmrpc_gym.integrations.godot": "Godot games that speak the GymGodot protocol",
    "dmrpc_gym.integrations.godot_rl": "Godot RL Agents games as gymnasium, PettingZoo and dm_env_rpc worlds",
    "dmrpc_gym.spaces": "TensorSpec <-> gymnasium space",
    "dmrpc_gym.worlds": "the bundled worlds, Catch and Tag",
    "dmrpc_gym.worlds.embedded": "the bundled worlds on in-process servers",
}

OUT = Path(__file__).resolve().parent.parent / "reference" / "api"


def public_names(module_name: str) -> list[str]:
    """The names a public module exports (its ``__all__``)."""
    module = importlib.import_module(module_name)
    return list(getattr(module, "__all__", []))


def _directive(obj: Any) -> str:
    if inspect.isclass(obj):
        return "autoclass"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.ismethod(obj):
        return "autofunction"
    return "autodata"


def _home(module_name: str, name: str, obj: Any) -> str:
    """Where a data name is defined (its ``#:`` comment is read there): the deepest module of
    the package that binds ``name`` to ``obj``."""
    import sys
    homes = [m for m, module in list(sys.modules.items())
             if m.startswith(module_name) and module is not None and getattr(module, "__dict__", {}).get(name) is obj]
    return max(homes, key=len, default=module_name)


def pages() -> dict[str, str]:
    """File name -> reStructuredText of every API page, and of the index of them."""
    documented: dict[int, str] = {}
    out: dict[str, str] = {}
    for module_name, summary in PUBLIC_MODULES.items():
        module = importlib.import_module(module_name)
        lines = [module_name, "=" * len(module_name), "",
                 f".. automodule:: {module_name}", "   :no-members:", ""]
        for name in public_names(module_name):
            if name.startswith("__"):
                if name == "__version__":
                    lines += [f".. py:data:: {name}", f"   :module: {module_name}", "", f"   The version: ``{module.__version__}``.", ""]
                continue
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            key = id(obj)
            if key in documented and (inspect.isclass(obj) or inspect.isfunction(obj)):
                lines += [f"``{name}``: see :py:obj:`{documented[key]}`.", ""]
                continue
            directive = _directive(obj)
            full = f"{_home(module_name, name, obj) if directive == 'autodata' else module_name}.{name}"
            documented.setdefault(key, full)
            lines.append(f".. {directive}:: {full}")
            if directive == "autoclass":
                lines += ["   :members:", "   :show-inheritance:"]
            elif directive == "autodata":
                lines.append("   :no-value:")
            lines.append("")
        out[f"{module_name}.rst"] = "\n".join(lines)
    index = ["API reference", "=============", "",
             "Generated from the docstrings of the public names at every build. Each page is a public",
             "module; each of its names (its ``__all__``) is documented once, on the first page that lists it.", "",
             ".. toctree::", "   :maxdepth: 1", ""]
    index += [f"   {module_name}" for module_name in PUBLIC_MODULES] + ["   internals"]
    index += ["", ".. list-table::", "   :header-rows: 1", "", "   * - module", "     - what it holds"]
    for module_name, summary in PUBLIC_MODULES.items():
        index += [f"   * - :doc:`{module_name}`", f"     - {summary}"]
    out["index.rst"] = "\n".join(index) + "\n"
    out["internals.rst"] = internals_page()
    return out


def internal_modules() -> list[str]:
    """Every module of the package that is not public, as the internals page lists them."""
    import pkgutil

    import dmrpc_gym
    names = []
    for info in pkgutil.walk_packages(dmrpc_gym.__path__, "dmrpc_gym."):
        if info.name in PUBLIC_MODULES or "._proto" in info.name or info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return sorted(names)


def internals_page() -> str:
    """The internal modules, each with its docstring: where a public docstring points inside."""
    lines = ["Internals", "=========", "",
             "The modules behind the public API, each with its docstring (what it holds and why).",
             "They may change between releases; the :doc:`index` is what stays. The layers are",
             "described in :doc:`../../architecture`.", ""]
    for name in internal_modules():
        lines += [name, "-" * len(name), "", f".. automodule:: {name}", "   :no-members:", ""]
    return "\n".join(lines)


def write_pages(app: Any = None) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        path = OUT / name
        if not path.exists() or path.read_text() != text:      # unchanged pages are not rebuilt
            path.write_text(text)


def setup(app: Any) -> dict:
    app.connect("builder-inited", write_pages)
    return {"parallel_read_safe": True, "version": "1"}
