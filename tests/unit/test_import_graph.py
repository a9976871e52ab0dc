"""The import graph of rmq_async/ has no cycle.

Every module is parsed with ``ast`` (nothing is imported); an edge A -> B is any import of B written
in A: at module level, under ``if TYPE_CHECKING:``, in a ``try`` or inside a function (a deferred
import is still a dependency), absolute or relative. ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``. Importing a submodule is not counted as an edge
to its parent packages (their ``__init__`` runs, but that is how packages work, not a dependency).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "rmq_async"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _imported(node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> Iterator[str]:
    """The dotted names an import statement in module ``name`` refers to (modules or attributes)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    for alias in node.names:
        yield f"{target}.{alias.name}"  # the submodule when it is one
        yield target


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = list(_imported(node, name, is_package))
            if isinstance(node, ast.ImportFrom):
                # "from pkg import x": pkg.x when that is a module, else pkg itself
                pairs = zip(targets[::2], targets[1::2], strict=True)
                targets = [sub if sub in mods else pkg for sub, pkg in pairs]
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: set[str] = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_cycle_in(graph, comp) for comp in components]


def _cycle_in(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first back to it)."""
    start = min(comp)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle found in component {sorted(comp)}")


def test_the_graph_sees_relative_and_type_checking_imports() -> None:
    graph = edges(modules())
    assert len(graph) > 20
    assert sum(len(v) for v in graph.values()) > len(graph)  # relative imports are resolved


def test_find_cycles_reports_a_cycle_as_a_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_rmq_async_has_no_import_cycle() -> None:
    cycles = find_cycles(edges(modules()))
    shown = "\n".join(" -> ".join(c) for c in cycles)
    print(shown)
    assert not cycles, f"{len(cycles)} import cycle(s) in {PACKAGE}/:\n{shown}"
