"""Old and short import paths, kept working: each is an alias of the module's home.

The package was flat before it was grouped by layer. ``import dmrpc_gym.vector``
(or ``from dmrpc_gym.connection import Connection``) still works: the old name
is a thin module that hands every attribute to the new one, so classes and
functions are the very same objects.

>>> import dmrpc_gym.connection, dmrpc_gym.client.connection
>>> dmrpc_gym.connection.Connection is dmrpc_gym.client.connection.Connection
True

The transport's modules moved into ``transport/client/`` and ``transport/server/`` (issue 31):
their old paths (:data:`MOVED`) still work, with a ``DeprecationWarning`` naming the new one.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

__all__ = ["ALIASES", "MOVED", "install"]

#: Old (or short) module name -> the module it stands for (or several, searched in order).
ALIASES = {
    "dmrpc_gym.wire": "dmrpc_gym.protocol.wire",
    "dmrpc_gym.errors": "dmrpc_gym.protocol.errors",
    "dmrpc_gym.tensors": "dmrpc_gym.protocol.tensors",
    "dmrpc_gym.specs": "dmrpc_gym.protocol.specs",
    "dmrpc_gym.h2": ("dmrpc_gym.transport.client.connection", "dmrpc_gym.transport.client.h2_transport"),
    "dmrpc_gym.connection": "dmrpc_gym.client.connection",
    "dmrpc_gym.agent": "dmrpc_gym.client.agent",
    "dmrpc_gym.env": "dmrpc_gym.client.env",
    "dmrpc_gym.properties": "dmrpc_gym.client.properties",
    "dmrpc_gym.vector": ("dmrpc_gym.client.vector", "dmrpc_gym.client.fanout", "dmrpc_gym.integrations.sb3"),
    "dmrpc_gym.parallel": ("dmrpc_gym.client.parallel", "dmrpc_gym.worlds.embedded"),
    "dmrpc_gym.wrappers": "dmrpc_gym.integrations.flat_spaces",
    "dmrpc_gym.report": "dmrpc_gym.app.report",
    "dmrpc_gym.embedded": "dmrpc_gym.worlds.embedded",
    "dmrpc_gym.cli": "dmrpc_gym.app.cli",
    # Short public paths of the integrations (the names the docs use).
    "dmrpc_gym.godot": "dmrpc_gym.integrations.godot",
    "dmrpc_gym.rllib": "dmrpc_gym.integrations.rllib",
}

#: The transport's old module paths -> their homes since issue 31; importing one warns.
MOVED = {
    "dmrpc_gym.transport.h2_client": "dmrpc_gym.transport.client.connection",
    "dmrpc_gym.transport.h2_stream": "dmrpc_gym.transport.client.stream",
    "dmrpc_gym.transport.h2_pool": "dmrpc_gym.transport.client.pool",
    "dmrpc_gym.transport.h2_idle": "dmrpc_gym.transport.client.keepalive",
    "dmrpc_gym.transport.keepalive": "dmrpc_gym.transport.client.idle_watcher",
    "dmrpc_gym.transport.h2_clock": "dmrpc_gym.transport.client.clock",
    "dmrpc_gym.transport.h2_control": "dmrpc_gym.transport.client.control",
    "dmrpc_gym.transport.h2_large": "dmrpc_gym.transport.client.large_messages",
    "dmrpc_gym.transport.interrupts": "dmrpc_gym.transport.client.interrupts",
    "dmrpc_gym.transport.h2_transport": "dmrpc_gym.transport.client.h2_transport",
    "dmrpc_gym.transport.grpcio_client": "dmrpc_gym.transport.client.grpcio_transport",
    "dmrpc_gym.transport.h2_server": "dmrpc_gym.transport.server.protocol",
    "dmrpc_gym.transport.h2_calls": "dmrpc_gym.transport.server.stream",
    "dmrpc_gym.transport.h2_requests": "dmrpc_gym.transport.server.requests",
    "dmrpc_gym.transport.h2_replies": "dmrpc_gym.transport.server.replies",
    "dmrpc_gym.transport.h2_conduct": "dmrpc_gym.transport.server.conduct",
    "dmrpc_gym.transport.eager": "dmrpc_gym.transport.server.eager",
    "dmrpc_gym.transport.h2_headers": "dmrpc_gym.transport.headers",
}
ALIASES.update(MOVED)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, targets: tuple[str, ...]):
        self.targets = targets

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return types.ModuleType(spec.name, f"Alias of {', '.join(self.targets)}.")

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ in MOVED:
            warnings.warn(f"{module.__name__} is deprecated: import {MOVED[module.__name__]} "
                          "(or the names of dmrpc_gym.transport)", DeprecationWarning, stacklevel=2)
        targets = [importlib.import_module(name) for name in self.targets]

        def __getattr__(name: str):                   # PEP 562: every attribute from the new home
            for target in targets:
                if hasattr(target, name):
                    return getattr(target, name)
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__
        module.__dir__ = lambda: sorted({n for t in targets for n in dir(t)})
        module.__all__ = [n for t in targets for n in getattr(t, "__all__", ())]


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = ALIASES.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader((new,) if isinstance(new, str) else new))


def install() -> None:
    """Make the old names importable (idempotent)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
