"""The package's layers: imports run one way, client and server never import each other, no cycles.

Inside the transport, the client and server halves share only the core and never import each other,
and the layers above import transport names only from its facade, ``dmrpc_gym.transport``.

Every ``import`` of every module is read from its source (those inside
functions too), so a lazy import cannot hide a wrong direction.
"""
from __future__ import annotations

import ast
import importlib
import pathlib
import sys

import pytest

from dmrpc_gym._compat import ALIASES, MOVED

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "dmrpc_gym"

#: Layer -> rank: a module may import its own layer and lower ranks only.
RANKS = {"protocol": 0, "transport": 1, "spaces": 1, "client": 2, "server": 2, "worlds": 3,
         "integrations": 4, "app": 5}
#: Layers of one rank that must not import each other either.
APART = [{"client", "server"}, {"transport", "spaces"}]
#: The package root (its __init__, registration and the old-path aliases) names modules
#: of every layer, but imports only these eagerly.
ROOT_EAGER = {"dmrpc_gym._compat", "dmrpc_gym._version", "dmrpc_gym.protocol.errors", "dmrpc_gym.registration"}
#: The transport's facade: the one transport module the layers above import.
FACADE = "dmrpc_gym.transport"


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts}


def imports(path: pathlib.Path, known: set[str]) -> list[tuple[str, bool]]:
    """``(imported module, at module level?)`` for every import of ours in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top = set(map(id, tree.body))
    for node in tree.body:       # `if TYPE_CHECKING:` imports run at type-checking time: module level too
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            top |= set(map(id, node.body))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a.b import c`: c may be a submodule (then that is what is imported).
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                     for alias in node.names]
        else:
            continue
        found += [(name, id(node) in top) for name in names if name.startswith("dmrpc_gym")]
    return found


def layer(module: str) -> str | None:
    if module == "dmrpc_gym.__main__":       # `python -m dmrpc_gym`: the command line
        return "app"
    alias = ALIASES.get(module)
    if alias is not None:                    # an old path is ranked as what it stands for
        module = alias if isinstance(alias, str) else max(alias, key=lambda m: RANKS[m.split(".")[1]])
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANKS else None


GRAPH = {name: imports(path, set(modules())) for name, path in modules().items()}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_run_down_the_layers(module):
    ours = layer(module)
    for target, eager in GRAPH[module]:
        theirs = layer(target)
        if ours is None:             # the package root
            assert not eager or target in ROOT_EAGER or target.startswith("dmrpc_gym.protocol"), \
                f"{module} imports {target} when the package is imported"
            continue
        if theirs is None or theirs == ours:
            continue
        assert {ours, theirs} not in APART, f"{module} ({ours}) imports {target} ({theirs})"
        assert RANKS[theirs] < RANKS[ours], \
            f"{module} ({ours}, rank {RANKS[ours]}) imports {target} ({theirs}, rank {RANKS[theirs]}): upward"


def transport_part(module: str) -> str | None:
    """``"client"`` or ``"server"`` (a half of the transport), ``"core"`` (shared), ``"facade"``, or None."""
    alias = ALIASES.get(module)
    module = alias if isinstance(alias, str) else module
    if module == FACADE:
        return "facade"
    if not module.startswith(FACADE + "."):
        return None
    part = module.split(".")[2]
    return part if part in ("client", "server") else "core"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if transport_part(m) in ("client", "server", "core")))
def test_transport_halves_share_only_the_core(module):
    """transport.client and transport.server never import each other; the core imports neither."""
    ours = transport_part(module)
    for target, _ in GRAPH[module]:
        theirs = transport_part(target)
        if theirs in (None, ours):
            continue
        assert theirs == "core", f"{module} (transport {ours}) imports {target} (transport {theirs})"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if layer(m) not in (None, "transport")))
def test_layers_above_use_the_transport_facade_only(module):
    for target, _ in GRAPH[module]:
        if layer(target) == "transport":
            assert target == FACADE, f"{module} imports {target}: import its names from {FACADE}"


def test_the_facade_names_the_transport_interface():
    import dmrpc_gym.transport as facade
    for name in ("Transport", "StreamEnded", "H2Transport", "GrpcioTransport", "SharedConnections", "GrpcProtocol",
                 "ConnectionLimits", "DEFAULT_MAX_MESSAGE", "ErrorCode", "GrpcStatus"):
        assert name in facade.__all__ and hasattr(facade, name), name


def test_no_import_cycles():
    eager = {m: {t for t, at_top in targets if at_top and t in GRAPH and t != m} for m, targets in GRAPH.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(eager[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t):] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(eager):
        if m not in state:
            visit(m)


def test_the_walk_sees_imports_and_would_catch_a_wrong_one(tmp_path):
    """The checks above are only as good as the walk: it must see lazy imports and submodules."""
    graph = GRAPH["dmrpc_gym.client.agent"]
    assert ("dmrpc_gym.protocol.spec_table", True) in graph
    assert any(not eager for module in GRAPH.values() for _, eager in module), "no lazy import seen at all"
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from dmrpc_gym.server import runner\n")
    assert imports(bad, set(GRAPH)) == [("dmrpc_gym.server.runner", False)]
    typing_only = tmp_path / "typing_only.py"
    typing_only.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dmrpc_gym.server import runner\n")
    assert imports(typing_only, set(GRAPH)) == [("dmrpc_gym.server.runner", True)]   # counted for cycles
    assert layer("dmrpc_gym.connection") == "client"   # an old path counts as its new home
    assert transport_part("dmrpc_gym.transport.h2_client") == "client"
    assert transport_part("dmrpc_gym.transport.frames") == "core"


def test_every_module_says_what_it_holds_and_stays_small():
    problems = []
    for name, path in sorted(modules().items()):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if not (doc and doc.strip()):
            problems.append(f"{name} has no docstring")
        lines = len(path.read_text().splitlines())
        if lines > 420:
            problems.append(f"{name} has {lines} lines; split it by concept")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_old_import_paths_still_work(old):
    """Every module that used to sit at the top of the package imports, and hands out the new home's objects."""
    if old in MOVED:            # a transport path that moved: it warns, naming the new one
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {MOVED[old]}"):
            alias = importlib.import_module(old)
    else:
        alias = importlib.import_module(old)
    targets = ALIASES[old] if isinstance(ALIASES[old], tuple) else (ALIASES[old],)
    homes = [importlib.import_module(t) for t in targets]
    # A mixin module lists no public names: its classes defined there stand in.
    names = [n for home in homes for n in getattr(home, "__all__", ())] or [
        n for home in homes for n, v in vars(home).items() if getattr(v, "__module__", None) == home.__name__]
    assert names, f"{old}'s new home lists no public names"
    for name in names:
        assert getattr(alias, name) is next(getattr(h, name) for h in homes if hasattr(h, name))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        alias.no_such_name
