"""The package's shape (issue 55): no module over 400 lines, and no import cycle among the modules of
reprocess/, plugins/ and bench/, counting the imports inside functions too (a cycle broken only by
importing late is still a circle of responsibilities), and no layer of reprocess/ importing a layer above it
(LAYERS). Read from the source (ast): no services."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("reprocess", "plugins", "bench")
MAX_LINES = 400


def modules(root: Path = REPO) -> dict[str, Path]:
    """Every module by its dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``path`` imports (``from package import module`` names the module)."""

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            named = [f"{node.module}.{a.name}" for a in node.names]
            names = [name if name in known else node.module for name in named]
        else:
            continue
        found |= {m for m in map(resolve, names) if m}
    return found


def cycles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        yield sorted(component)


def test_no_module_is_over_400_lines() -> None:
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these (at most {MAX_LINES} lines): {long}"


def test_the_import_graph_has_no_cycle() -> None:
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    found = list(cycles(graph))
    assert not found, f"import cycles: {found}"


def test_a_cycle_is_found() -> None:
    assert list(cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == [["a", "b", "c"]]


# What each layer of reprocess/ may import (docs/development/layout.md's table, and each folder's
# ``__init__`` docstring): a lower layer never imports a higher one.
LAYERS = {
    "core": set(),
    "formats": {"core"},
    "kafka": {"core"},
    "postgres": {"core"},
    "checks": {"core", "postgres"},
    "spark": {"core", "formats", "kafka", "postgres"},
    "operations": {"core", "formats", "kafka", "postgres", "checks"},
    "runner": {"core", "formats", "kafka", "postgres", "checks", "spark", "operations"},
    "airflow": {"core", "formats", "kafka", "postgres", "checks", "spark", "operations", "runner"},
    "cli": {"core", "formats", "kafka", "postgres", "checks", "spark", "operations", "runner", "airflow"},
}


def layer_breaches(known: dict[str, Path]) -> list[str]:
    """Each import of a layer the importing module's layer may not import, as ``module → module``."""
    breaches = []
    for name, path in sorted(known.items()):
        parts = name.split(".")
        if parts[0] != "reprocess" or len(parts) < 2 or parts[1] not in LAYERS:
            continue
        for imported in sorted(imports(path, known)):
            target = imported.split(".")
            layer = target[1] if target[0] == "reprocess" and len(target) > 1 else parts[1]
            if layer != parts[1] and layer not in LAYERS[parts[1]]:
                breaches.append(f"{name} → {imported}")
    return breaches


def test_no_layer_imports_a_layer_above_it() -> None:
    known = modules()
    assert {name.split(".")[1] for name in known if name.count(".") == 1 and name.startswith("reprocess.")} >= set(
        LAYERS
    ), "a layer of LAYERS is gone"
    assert layer_breaches(known) == []


def test_a_layer_breach_is_found(tmp_path: Path) -> None:
    for module, text in {"core/a.py": "from reprocess.spark import job\n", "spark/job.py": ""}.items():
        path = tmp_path / "reprocess" / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    known = {
        "reprocess.core.a": tmp_path / "reprocess/core/a.py",
        "reprocess.spark.job": tmp_path / "reprocess/spark/job.py",
    }
    assert layer_breaches(known) == ["reprocess.core.a → reprocess.spark.job"]
