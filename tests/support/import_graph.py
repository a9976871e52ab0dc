"""The import graph of rmq_async/, read with ``ast`` (nothing is imported): shared by the cycle test
(tests/unit/test_import_graph.py) and the import-rules test (tests/unit/test_import_rules.py).

An edge A -> B is any import of B written in A: at module level, under ``if TYPE_CHECKING:``, in a
``try`` or inside a function (a deferred import is still a dependency), absolute or relative. ``from
pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. Importing a
submodule is not counted as an edge to its parent packages (their ``__init__`` runs, but that is how
packages work, not a dependency).
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
