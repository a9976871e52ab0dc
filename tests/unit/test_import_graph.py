"""The import graph of rmq_async/ has no cycle.

Every module is parsed with ``ast`` (nothing is imported); an edge A -> B is any import of B written
in A: at module level, under ``if TYPE_CHECKING:``, in a ``try`` or inside a function (a deferred
import is still a dependency), absolute or relative. ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``. Importing a submodule is not counted as an edge
to its parent packages (their ``__init__`` runs, but that is how packages work, not a dependency).
"""

from __future__ import annotations

from support.import_graph import PACKAGE, edges, modules


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
