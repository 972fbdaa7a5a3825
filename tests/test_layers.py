"""The import graph of `synapse_cli/` and `store_format/` (docs/ARCHITECTURE.md): no circle
between modules, and no import from a lower layer to a higher one.

Every `import` and `from ... import` counts, module-level or inside a function (a lazy import
is still a dependency), except those under `if TYPE_CHECKING:` (annotations only). An edge goes
to the module named: `from .pkg import mod` to the module pkg/mod.py, `from .pkg import name`
to pkg/__init__.py. The implicit import of a package's __init__ by its submodules is not an
edge (Python runs it first, but it is not a choice the module makes).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("synapse_cli", "store_format")

# layer -> the layers it must not import (a layer is a module-name prefix)
FORBIDDEN = {
    "store_format": ("synapse_cli",),
    "synapse_cli.kernels": ("synapse_cli.engine", "synapse_cli.commands", "synapse_cli.models",
                            "synapse_cli.api", "synapse_cli.mcp_server", "synapse_cli.__main__"),
    "synapse_cli.models": ("synapse_cli.engine", "synapse_cli.commands", "synapse_cli.api",
                           "synapse_cli.mcp_server", "synapse_cli.__main__"),
    "synapse_cli.engine": ("synapse_cli.commands", "synapse_cli.api", "synapse_cli.mcp_server",
                           "synapse_cli.__main__"),
}


def modules() -> dict[str, Path]:
    """module name -> file, for every .py under the packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, outside `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _inside(name: str, mods: dict) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in mods:
            return ".".join(parts)
        parts.pop()
    return None


def graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}."""
    mods = modules()
    edges: dict[str, dict[str, int]] = {m: {} for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = mod.split(".") if is_pkg else mod.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module
                for a in node.names:
                    full = f"{base}.{a.name}"
                    targets.append(full if full in mods else base)
            for t in targets:
                hit = _inside(t, mods)
                if hit is not None and hit != mod:
                    edges[mod].setdefault(hit, node.lineno)
    return edges


def _layer_of(mod: str, layers) -> str | None:
    for layer in layers:
        if mod == layer or mod.startswith(layer + "."):
            return layer
    return None


def test_no_upward_imports():
    edges = graph()
    bad = []
    for mod, deps in edges.items():
        layer = _layer_of(mod, FORBIDDEN)
        if layer is None:
            continue
        for dep, line in deps.items():
            if _layer_of(dep, FORBIDDEN[layer]) is not None:
                bad.append(f"{mod}:{line} imports {dep} ({layer} must not import "
                           f"{_layer_of(dep, FORBIDDEN[layer])})")
    assert not bad, "upward imports:\n  " + "\n  ".join(bad)


def _cycles(edges) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module
    (Tarjan, iterative)."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
    out = []
    for comp in comps:  # a shortest way back to the start, inside the component
        members, start = set(comp), comp[0]
        prev, frontier = {start: None}, [start]
        cycle = None
        while frontier and cycle is None:
            nxt = []
            for v in frontier:
                for w in sorted(edges[v]):
                    if w == start:
                        path = [v]
                        while prev[path[-1]] is not None:
                            path.append(prev[path[-1]])
                        cycle = list(reversed(path)) + [start]
                        break
                    if w in members and w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if cycle:
                    break
            frontier = nxt
        out.append(cycle)
    return out


def test_no_import_circles():
    edges = graph()
    chains = [" -> ".join(f"{a} (line {edges[a][b]})" for a, b in zip(c, c[1:])) + f" -> {c[-1]}"
              for c in _cycles(edges)]
    assert not chains, "import circles:\n  " + "\n  ".join(chains)


def test_the_graph_sees_lazy_and_relative_imports():
    """The parser itself: a function-local relative import is an edge."""
    edges = graph()
    assert "store_format.flags" in edges["synapse_cli.engine.store"] or \
        "store_format.graph_files" in edges["synapse_cli.engine.store"]
    assert "synapse_cli.kernels.header_scan" in edges[_inside_name(edges, "scan_records")]


def _inside_name(edges, function: str) -> str:
    """The module that defines `function` at top level."""
    for mod, path in modules().items():
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body):
            return mod
    raise AssertionError(function)
