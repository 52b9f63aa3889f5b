"""The package's layers: imports run one way, client and server never import each other, no cycles.

Inside the transport, the client and server halves share only the core and never import each other,
and the layers above import transport names only from its facade, ``dmrpc_gym.transport``.

Every ``import`` of every module is read from its source (those inside
functions too), so a lazy import cannot hide a wrong direction.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "dmrpc_gym"

#: Layer -> rank: a module may import its own layer and lower ranks only.
RANKS = {"protocol": 0, "transport": 1, "spaces": 1, "client": 2, "server": 2, "worlds": 3,
         "integrations": 4, "app": 5}
#: Layers of one rank that must not import each other either.
APART = [{"client", "server"}, {"transport", "spaces"}]
#: The package root (its __init__ and registration) names modules
#: of every layer, but imports only these eagerly.
ROOT_EAGER = {"dmrpc_gym._version", "dmrpc_gym.protocol.errors", "dmrpc_gym.registration"}
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
    bad.write_text("def f():\n    from dmrpc_gym.server.serving import runner\n")
    assert imports(bad, set(GRAPH)) == [("dmrpc_gym.server.serving.runner", False)]
    typing_only = tmp_path / "typing_only.py"
    typing_only.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dmrpc_gym.server.serving import runner\n")
    assert imports(typing_only, set(GRAPH)) == [("dmrpc_gym.server.serving.runner", True)]   # counted for cycles
    assert layer("dmrpc_gym.client.connection") == "client"
    assert transport_part("dmrpc_gym.transport.client.connection") == "client"
    assert transport_part("dmrpc_gym.transport.frames") == "core"


#: Past this many lines a module says in its docstring why it is one concept (a line that begins
#: "One concept:"). Modules are split by concept, never by line count: h2's ``connection.py`` is one
#: concept in 2,117 lines.
LONG = 600


def test_every_module_says_what_it_holds():
    problems = []
    for name, path in sorted(modules().items()):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if not (doc and doc.strip()):
            problems.append(f"{name} has no docstring")
            continue
        lines = len(path.read_text().splitlines())
        if lines > LONG and not any(line.startswith("One concept:") for line in doc.splitlines()):
            problems.append(f"{name} has {lines} lines and its docstring does not say why it is one concept "
                            f"(a line beginning 'One concept:')")
    assert not problems, "\n".join(problems)


def test_no_module_keeps_old_import_paths():
    """The package is unreleased: a moved module leaves no alias behind (issue 39)."""
    assert not (PACKAGE / "_compat.py").exists()
    with pytest.raises(ModuleNotFoundError):
        __import__("dmrpc_gym.connection")
