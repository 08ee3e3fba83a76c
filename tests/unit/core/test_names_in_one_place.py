"""Every id and derived name is spelled in reprocess/core/names.py alone (issue 55): a run, batch,
plan or check id, a generated DAG's or Asset's id, a swap's kept table or index, built or parsed by
hand anywhere else in the code that runs, drives or measures the product, is named here with its line.

The scan reads the source (ast), so it needs no services; the shapes it looks for are the ones the
issue found spelled by hand (f-strings and string tests), not a list of today's call sites.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("reprocess", "plugins", "bench", "soak", "devstack", "spark_apps", "tests/support")
NAMES = REPO / "reprocess" / "core" / "names.py"
# A variable, parameter or keyword that holds an id: building one from parts is names.py's job.
ID_NAME = re.compile(r"^(\w+_)?(run_id|plan_id|apply_id|check_id|lineage_id|run_key|owner)$")
DAG_SUFFIXES = ("_backfill", "_incremental", "_reconcile", "_audit", "_reset", "_broken", "_new_records")
TABLE_MARKS = ("__old_", "__rebuild", "__shadow")


def _parts(node: ast.JoinedStr) -> list[str | None]:
    """An f-string as its literal parts, None for each formatted value."""
    return [v.value if isinstance(v, ast.Constant) else None for v in node.values]


def _hand_spelled(node: ast.AST) -> str | None:
    """What id ``node`` builds or parses by hand, or None."""
    if isinstance(node, ast.JoinedStr):
        parts = _parts(node)
        literal = [p for p in parts if isinstance(p, str)]
        if parts[0] == "reprocess_" and (len(parts) > 2 or parts[-1] in DAG_SUFFIXES):  # the pipeline, then more
            return "a generated DAG's or Asset's id"
        if any(mark in p for p in literal for mark in TABLE_MARKS):
            return "a derived table or index name"
        if any(p == "#" and i and parts[i - 1] is None for i, p in enumerate(parts)):
            return "a batch's run id"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            method, text = node.func.attr, first.value
            if (method, text) == ("startswith", "reprocess_") or (method == "endswith" and text in DAG_SUFFIXES):
                return "a DAG id parsed by hand"
            receiver = node.func.value
            held = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "")
            if method in ("split", "rsplit", "partition") and text == "#" and ("run" in held or held.endswith("_id")):
                return "a batch's run id parsed by hand"
    return None


def _built_id(node: ast.AST) -> str | None:
    """An id assigned or passed from an f-string or a concatenation."""
    pairs: list[tuple[str | None, ast.expr]] = []
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                named = [t.id if isinstance(t, ast.Name) else None for t in target.elts]
                pairs += zip(named, node.value.elts, strict=True)
            elif isinstance(target, ast.Name):
                pairs.append((target.id, node.value))
    elif isinstance(node, ast.keyword):
        pairs.append((node.arg, node.value))
    elif isinstance(node, ast.Dict):  # a query's bound values
        pairs += [(k.value, v) for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)]
    pairs = [(name, v.values[-1] if isinstance(v, ast.BoolOp) else v) for name, v in pairs]  # `given or built`
    for name, value in pairs:
        templated = any(isinstance(c, ast.Constant) and "{{" in str(c.value) for c in ast.walk(value))  # Jinja
        built = isinstance(value, ast.JoinedStr | ast.BinOp) and not templated
        if isinstance(name, str) and ID_NAME.match(name) and built:
            return f"{name} built by hand"
    return None


def hand_spelled_ids(root: Path = REPO) -> Iterator[str]:
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            if path == NAMES:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if what := _hand_spelled(node) or _built_id(node):
                    yield f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}: {what}"


def test_ids_and_derived_names_are_spelled_in_names_py_alone() -> None:
    found = list(hand_spelled_ids())
    assert not found, "spell these through reprocess/core/names.py:\n" + "\n".join(found)


def test_the_scan_finds_each_shape_it_looks_for(tmp_path: Path) -> None:
    """The scan itself: each hand-spelled shape the issue named is found, a names.py call is not."""
    source = tmp_path / "reprocess" / "example.py"
    source.parent.mkdir()
    source.write_text(
        "dag = f'reprocess_{p}_incremental'\n"
        "old = f'{table[:40]}__old_{stamp}'\n"
        "child = f'{run}#{k}'\n"
        "run_id = f'{spec.name}/{name}'\n"
        "plan_id, apply_id = f'plan-{x}', 'apply-' + x\n"
        "noted = dag_id.startswith('reprocess_')\n"
        "parent = run.split('#', 1)[0]\n"
        "start(run_id=f'apply-{plan}')\n"
        "plan_id = given or f'plan-{spec.name}'\n"
        "conn.execute(q, {'run_id': f'reset:{n}'})\n"
        "dags = [f'reprocess_{p}_{k}' for k in kinds]\n"
        "owner = f'{spec.name}/{RunMode.REBUILD.value}'\n"
        "connector = f'reprocess_{pipeline}'\n"
        "fine = names.local_run_id(spec.name, name)\n"
    )
    found = sorted(int(line.split(": ", 1)[0].rsplit(":", 1)[1]) for line in hand_spelled_ids(tmp_path))
    assert found == list(range(1, 13)), found
