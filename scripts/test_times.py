#!/usr/bin/env python3
"""Where `make test`'s time goes, from the JUnit XML it writes (docs/testing.md's tables).

Reads every part's XML in the report folder (``scripts/run_tests.sh``): each part's wall time and
test time, the parallel part's idle worker time (workers × wall − the time its tests took), the
time per test file, per kind of fixture the test uses (read from its source: an Airflow DAG run, a
Spark run, Kafka Connect, an Airflow install, Postgres and Kafka only), and the slowest tests.

    python scripts/test_times.py REPORT_DIR [--workers 2] [--top 30]
"""

from __future__ import annotations

import argparse
import ast
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# A test's kind is the first of these its body (or the helpers it names) shows, in this order.
KINDS = (
    ("Airflow install (a venv of its own)", ("install_lane", "readme_install", "build_wheel")),
    ("Kafka Connect (Debezium connector)", ("debezium_connector", "kafka_connect")),
    ("Airflow DAG run (dag.test)", ("run_dag(", ".test(", "dags test")),
    ("Spark run", ("spark", "backfill(", "plan_stage_commit(", "hostile_run", "run_and_check", "reconcile_over")),
)
OTHER = "Postgres and Kafka only (no Spark)"
UNIT = "unit (tests/unit)"


@dataclass(frozen=True, slots=True)
class Case:
    part: str
    file: str
    name: str
    seconds: float


def cases(folder: Path) -> tuple[list[Case], dict[str, float]]:
    """Every test case of the folder's XML files, and each part's wall time (its suite's time)."""
    found, walls = [], {}
    for xml in sorted(folder.glob("*.xml")):
        root = ET.parse(xml).getroot()
        suite = root if root.tag == "testsuite" else root.find("testsuite")
        walls[xml.stem] = float(suite.get("time", 0)) if suite is not None else 0.0
        for case in root.iter("testcase"):
            file = (case.get("file") or case.get("classname", "").replace(".", "/") + ".py").split("/")[-1]
            found.append(Case(xml.stem, file, case.get("name", ""), float(case.get("time", 0))))
    return found, walls


@cache
def _path(file: str) -> Path | None:
    return next(REPO.glob(f"tests/**/{file}"), None)


@cache
def _sources(file: str) -> dict[str, str]:
    """The test functions of a test file by name, their source text."""
    if (path := _path(file)) is not None:
        text = path.read_text()
        tree = ast.parse(text)
        return {n.name: ast.get_source_segment(text, n) or "" for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    return {}


def kind(case: Case) -> str:
    if (path := _path(case.file)) is not None and "unit" in path.parts:
        return UNIT
    source = _sources(case.file).get(case.name.split("[")[0], "")
    for label, marks in KINDS:
        if any(mark in source for mark in marks):
            return label
    return OTHER


def table(header: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--workers", type=int, default=2, help="the parallel part's xdist workers")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    found, walls = cases(args.folder)
    parts = []
    for part, wall in walls.items():
        spent = sum(c.seconds for c in found if c.part == part)
        idle = f"{args.workers * wall - spent:,.0f}" if part == "parallel" else ""
        parts.append((part, sum(c.part == part for c in found), f"{wall:,.0f}", f"{spent:,.0f}", idle))
    print("### Parts\n")
    print(table(("part", "tests", "wall s", "test s", "idle worker s"), parts))
    by_file: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for c in found:
        by_file[(c.part, c.file)].append(c.seconds)
        by_kind[kind(c)].append(c.seconds)
    files = sorted(by_file.items(), key=lambda kv: -sum(kv[1]))
    print("\n### Per test file\n")
    print(table(("file", "part", "tests", "s"), [(f, p, len(s), f"{sum(s):,.0f}") for (p, f), s in files]))
    kinds = sorted(by_kind.items(), key=lambda kv: -sum(kv[1]))
    print("\n### Per fixture kind\n")
    rows = [(k, len(s), f"{sum(s):,.0f}", f"{sum(s) / len(s):.1f}", sum(x > 60 for x in s)) for k, s in kinds]
    print(table(("kind", "tests", "s", "mean s", "over 60 s"), rows))
    print(f"\n### The {args.top} slowest tests\n")
    slow = sorted(found, key=lambda c: -c.seconds)[: args.top]
    print(table(("test", "part", "s"), [(f"{c.file}::{c.name}", c.part, f"{c.seconds:.0f}") for c in slow]))


if __name__ == "__main__":
    main()
