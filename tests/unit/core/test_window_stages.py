"""A window check is stage values like a run (``Snapshot → Read → Verdicts``), built without services,
each naming the task of the reconcile DAG that evaluates it; the DAG is built from them."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

from reprocess.core.ranges import OffsetRange
from reprocess.core.stages import describe
from reprocess.core.window_stages import ReadWindow, SnapshotWindow, Verdicts, window_stages

START, END = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)
ORDERS = Path(__file__).resolve().parents[3] / "pipelines" / "orders.yaml"


def test_a_window_check_is_snapshot_then_read_then_verdicts_the_snapshot_giving_the_ranges() -> None:
    snapshot = SnapshotWindow("c1", START, END, healed_by="r9")
    ranges = (OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 0, 0))
    held, unread = (OffsetRange("t", 0, 9, 12),), (OffsetRange("t", 1, 0, 4),)
    read, verdicts = window_stages(snapshot, ranges, held, unread)
    assert describe((snapshot, read, verdicts)) == (
        "snapshot_window: SnapshotWindow(c1) | spark_window_stage: ReadWindow(c1) | reconcile: Verdicts(c1)"
    )
    assert read == ReadWindow("c1", ranges)
    assert verdicts == Verdicts("c1", START, END, ranges, held, unread, "r9")


def test_the_reconcile_dag_runs_each_window_stage_in_the_task_it_names_in_order() -> None:
    from reprocess.airflow.reconcile_dag import build_reconcile_dag
    from reprocess.formats.specs import read_spec

    dag = build_reconcile_dag(read_spec(ORDERS))
    snapshot = SnapshotWindow("c1", START, END)
    tasks = [s.task.value for s in (snapshot, *window_stages(snapshot, ()))]
    assert tasks == ["snapshot_window", "spark_window_stage", "reconcile"]  # the task ids runs and alerts know
    for before, after in itertools.pairwise(tasks):
        assert after in dag.get_task(before).downstream_task_ids
    assert "Snapshot" in (dag.doc_md or "") and "Verdicts" in (dag.doc_md or "")
