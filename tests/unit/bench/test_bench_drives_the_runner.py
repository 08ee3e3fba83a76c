"""bench/ drives runs through the runner like every other caller (issue 55): the start
(``reprocess.runner.start``/``preview``), the Spark task's entry (``read_job``) and ``evaluate``,
never the pieces of a run (its planning, its commit, a rebuild's swap) directly. The ceilings are
the exception by design: they measure the product's SQL and read alone, so they import those, not a
run's steps. Read from the source (ast): no services."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# The modules that hold a run's steps: a caller starts and evaluates a run instead.
RUN_STEPS = (
    "reprocess.operations.plan",
    "reprocess.operations.snapshot",
    "reprocess.operations.rebuild",
    "reprocess.postgres.commit",
    "reprocess.postgres.batch_commit",
    "reprocess.postgres.merge_stage",
    "reprocess.postgres.swap",
)
TYPES = {"CommitResult"}  # a result's type is no step
# What a caller takes from the runner: the start (a run's, a plan's apply), the Spark task's entry, the
# evaluator; not the helpers that snapshot or commit a run by its parts.
RUNNER = {
    "reprocess.runner.start": {"start_run"},
    "reprocess.runner.preview": {"start_apply", "run_here"},
    "reprocess.runner.spark_run": {"read_job"},
    "reprocess.runner.evaluate": {"evaluate", "RunContext"},
}


def steps_imported(folder: Path) -> Iterator[str]:
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            names = {a.name for a in node.names}
            if node.module in RUN_STEPS:
                names -= TYPES
            elif node.module in RUNNER:
                names -= RUNNER[node.module]
            else:
                continue
            if names:
                yield f"{path.relative_to(folder.parent)}:{node.lineno}: {node.module} {sorted(names)}"


def test_bench_starts_and_evaluates_runs_through_the_runner() -> None:
    found = list(steps_imported(REPO / "bench"))
    assert not found, "drive these through reprocess.runner (start_run, read_job, evaluate):\n" + "\n".join(found)
