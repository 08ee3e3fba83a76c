"""A chunked run commits batch k while batch k+1 stages, and never commits past a failed commit.

The store is replaced by a few lines (a unit test: the integration tests in test_batches.py run
chunked runs against PostgreSQL, Kafka and Spark).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest

from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunKind, RunPlan, RunState
from reprocess.postgres import batches, store

WAIT_S = 10.0


class _Engine:
    def begin(self) -> Any:
        return nullcontext(None)

    def connect(self) -> Any:
        return nullcontext(None)


def _plan(batch_count: int) -> RunPlan:
    return RunPlan("run", "p", RunKind.BACKFILL, (OffsetRange("t", 0, 0, 10 * batch_count),))


@pytest.fixture
def fake_store(monkeypatch: pytest.MonkeyPatch) -> dict[str, RunState]:
    states: dict[str, RunState] = {}
    monkeypatch.setattr(store, "create_batch_runs", lambda conn, parent, cut: dict(states))
    monkeypatch.setattr(store, "load_plan", lambda conn, run_id: RunPlan(run_id, "p", RunKind.BACKFILL, ()))
    return states


def test_a_batch_commits_while_the_next_one_stages(fake_store: dict[str, RunState]) -> None:
    events: list[str] = []
    first_commit_started = threading.Event()

    def stage(plan: RunPlan, k: int, n: int) -> int:
        if k == 1:  # only returns once batch 0's commit runs beside it
            assert first_commit_started.wait(WAIT_S), "batch 0 did not commit while batch 1 staged"
        events.append(f"stage {k}")
        return k

    def commit(plan: RunPlan, k: int, n: int, rows: int) -> None:
        if k == 0:
            first_commit_started.set()
        events.append(f"commit {k} ({plan.run_id}, {rows} rows)")

    assert batches.run_in_batches(_Engine(), _plan(3), 10, stage, commit) == 3  # type: ignore[arg-type]
    commits = [e for e in events if e.startswith("commit")]
    assert commits == ["commit 0 (run#0, 0 rows)", "commit 1 (run#1, 1 rows)", "commit 2 (run#2, 2 rows)"]


def test_no_batch_commits_after_a_failed_commit(fake_store: dict[str, RunState]) -> None:
    committed: list[int] = []

    def commit(plan: RunPlan, k: int, n: int, rows: int) -> None:
        if k == 1:
            raise RuntimeError("merge refused")
        committed.append(k)

    with pytest.raises(RuntimeError, match="merge refused"):
        batches.run_in_batches(_Engine(), _plan(4), 10, lambda plan, k, n: 0, commit)  # type: ignore[arg-type]
    assert committed == [0]


def _stage_failing_in_batch_1(release: threading.Event) -> Callable[[RunPlan, int, int], int]:
    """A stage that fails on batch 1, once it let batch 0's commit go on (``release``)."""

    def stage(plan: RunPlan, k: int, n: int) -> int:
        if k == 1:
            release.set()
            raise RuntimeError("Spark failed")
        return 0

    return stage


def test_a_failed_stage_waits_for_the_commit_in_flight(fake_store: dict[str, RunState]) -> None:
    release = threading.Event()
    finished: list[int] = []

    def commit(plan: RunPlan, k: int, n: int, rows: int) -> None:
        assert release.wait(WAIT_S)
        finished.append(k)

    with pytest.raises(RuntimeError, match="Spark failed"):
        batches.run_in_batches(_Engine(), _plan(3), 10, _stage_failing_in_batch_1(release), commit)  # type: ignore[arg-type]
    assert finished == [0]  # batch 0's commit ended before the error left run_in_batches


def test_a_failed_stage_and_a_failed_commit_are_both_told(
    fake_store: dict[str, RunState], caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    def commit(plan: RunPlan, k: int, n: int, rows: int) -> None:
        assert release.wait(WAIT_S)
        raise RuntimeError("merge refused")

    with pytest.raises(RuntimeError, match="Spark failed"):
        batches.run_in_batches(_Engine(), _plan(3), 10, _stage_failing_in_batch_1(release), commit)  # type: ignore[arg-type]
    assert "a batch's commit failed as well: merge refused" in caplog.text


def test_committed_batches_are_skipped_on_resume(fake_store: dict[str, RunState]) -> None:
    fake_store.update({"run#0": RunState.COMMITTED, "run#1": RunState.COMMITTED})
    staged: list[int] = []

    def stage(plan: RunPlan, k: int, n: int) -> int:
        staged.append(k)
        return 0

    batches.run_in_batches(_Engine(), _plan(3), 10, stage, lambda plan, k, n, rows: None)  # type: ignore[arg-type]
    assert staged == [2]
