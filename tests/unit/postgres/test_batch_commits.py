"""A chunked run commits batch k while batch k+1 reads, and never commits past a failed commit:
the evaluator of a run's stages (reprocess.runner.evaluate).

The store and the commit are replaced by a few lines (a unit test: the integration tests in
test_batches.py run chunked runs against PostgreSQL, Kafka and Spark).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest

from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunKind, RunMode, RunRanges
from reprocess.core.stages import Read, build_stages, for_task
from reprocess.core.tasks import Task
from reprocess.formats.specs import parse_spec
from reprocess.postgres import store
from reprocess.postgres.commit import CommitResult
from reprocess.runner import evaluate

WAIT_S = 10.0


class _Engine:
    def begin(self) -> Any:
        return nullcontext(None)


def _stages(batch_count: int, committed: frozenset[str] = frozenset()) -> Any:
    plan = RunRanges("run", "p", RunKind.BACKFILL, (OffsetRange("t", 0, 0, 10 * batch_count),))
    spec = parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}})
    stages = build_stages(plan, spec, RunMode.MERGE, 10, committed=committed)
    return for_task(stages, Task.SPARK)  # the run's own commit is the commit task's


class _Reader:
    def __init__(self, read: Callable[[int], int]) -> None:
        self._read = read

    def read(self, stage: Read) -> int:
        return self._read(stage.batch or 0)

    def committed(self, stage: Read, records: int) -> None:
        pass


def _result(run_id: str) -> CommitResult:
    return CommitResult(run_id, False, 0, 0, 0, 0, 0, 0)


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[str], None]]:
    """Replace the store and the commit; the test appends the commit's behaviour (by run id)."""
    behaviour: list[Callable[[str], None]] = []
    monkeypatch.setattr(store, "create_batch_runs", lambda conn, parent, cut: {})
    monkeypatch.setattr(store, "mark_staged", lambda conn, run_id, rows: None)
    monkeypatch.setattr(evaluate, "check_spec_version", lambda *a, **k: 1)

    def commit_merge(engine: Any, spec: Any, merge: Any) -> CommitResult:
        for b in behaviour:
            b(merge.run_id)
        return _result(merge.run_id)

    monkeypatch.setattr(evaluate, "commit_merge", commit_merge)
    return behaviour


def _run(stages: Any, read: Callable[[int], int]) -> None:
    spec = type("Spec", (), {"name": "p"})()
    evaluate.evaluate(stages, evaluate.RunContext(_Engine(), spec, reader=_Reader(read)))  # type: ignore[arg-type]


def test_a_batch_commits_while_the_next_one_reads(commits: list[Callable[[str], None]]) -> None:
    events: list[str] = []
    first_commit_started = threading.Event()

    def read(k: int) -> int:
        if k == 1:  # only returns once batch 0's commit runs beside it
            assert first_commit_started.wait(WAIT_S), "batch 0 did not commit while batch 1 read"
        events.append(f"read {k}")
        return k

    def commit(run_id: str) -> None:
        if run_id == "run#0":
            first_commit_started.set()
        events.append(f"commit {run_id}")

    commits.append(commit)
    _run(_stages(3), read)
    assert [e for e in events if e.startswith("commit")] == ["commit run#0", "commit run#1", "commit run#2"]


def test_no_batch_commits_after_a_failed_commit(commits: list[Callable[[str], None]]) -> None:
    committed: list[str] = []

    def commit(run_id: str) -> None:
        if run_id == "run#1":
            raise RuntimeError("merge refused")
        committed.append(run_id)

    commits.append(commit)
    with pytest.raises(RuntimeError, match="merge refused"):
        _run(_stages(4), lambda k: 0)
    assert committed == ["run#0"]


def _read_failing_in_batch_1(release: threading.Event) -> Callable[[int], int]:
    """A read that fails on batch 1, once it let batch 0's commit go on (``release``)."""

    def read(k: int) -> int:
        if k == 1:
            release.set()
            raise RuntimeError("Spark failed")
        return 0

    return read


def test_a_failed_read_waits_for_the_commit_in_flight(commits: list[Callable[[str], None]]) -> None:
    release = threading.Event()
    finished: list[str] = []

    def commit(run_id: str) -> None:
        assert release.wait(WAIT_S)
        finished.append(run_id)

    commits.append(commit)
    with pytest.raises(RuntimeError, match="Spark failed"):
        _run(_stages(3), _read_failing_in_batch_1(release))
    assert finished == ["run#0"]  # batch 0's commit ended before the error left the evaluator


def test_a_failed_read_and_a_failed_commit_are_both_told(
    commits: list[Callable[[str], None]], caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    def commit(run_id: str) -> None:
        assert release.wait(WAIT_S)
        raise RuntimeError("merge refused")

    commits.append(commit)
    with pytest.raises(RuntimeError, match="Spark failed"):
        _run(_stages(3), _read_failing_in_batch_1(release))
    assert "a batch's commit failed as well: merge refused" in caplog.text


def test_committed_batches_are_left_out_on_resume(commits: list[Callable[[str], None]]) -> None:
    read: list[int] = []
    _run(_stages(3, frozenset({"run#0", "run#1"})), lambda k: read.append(k) or 0)
    assert read == [2]
