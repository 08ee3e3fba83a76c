"""Chunked runs: each batch commits atomically, and a killed job resumes after the last committed batch."""

from __future__ import annotations

import logging
import os
import signal
import time
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support import oracle
from tests.support.helpers import (
    dead_letter_count,
    ledger,
    log_ends,
    orders_spec,
    run_spark_stage,
    start_spark_stage,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]


def _batches(engine, run_id: str) -> list[tuple[int, str, object]]:
    return _of_run(engine, "SELECT batch_index, state, committed_at FROM reprocess.runs WHERE parent_run_id = :r "
                           "ORDER BY batch_index", run_id)  # fmt: skip


def _ranges(engine, run_id: str) -> list[tuple[int, int, int]]:
    return _of_run(engine, "SELECT partition, start_offset, end_offset FROM reprocess.run_ranges WHERE run_id = :r "
                           "ORDER BY partition", run_id)  # fmt: skip


def _of_run(engine, query: str, run_id: str) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(text(query), {"r": run_id}).all())


def test_killed_chunked_run_resumes_after_the_last_committed_batch(kafka_config, engine, unique_name, caplog):
    # The malformed messages all land in the last batch; the per-batch threshold must not trip.
    spec = orders_spec(unique_name, unique_name, max_dead_letter_ratio=0.5)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(150, 4), transactional_every=80)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({"batch_size": 60}), unique_name)
    n = max(-(-r.width // 60) for r in plan.ranges)
    assert n >= 4

    # First attempt: killed (SIGKILL of the whole spark-submit process group) after batch 1 committed.
    job = start_spark_stage(spec, plan.run_id, batch_size=60)
    deadline = time.monotonic() + 240
    while not any(state == "committed" for _, state, _ in _batches(engine, plan.run_id)):
        assert job.poll() is None, job.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no batch committed within 240 s"
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    before = {k: at for k, state, at in _batches(engine, plan.run_id) if state == "committed"}
    assert 0 < len(before) < n

    # Second attempt resumes: committed batches are not redone, the rest commit one by one. It runs
    # on the warm Connect server (the DAG's default launcher; the resume is the job's own whichever
    # launcher runs it, and a second cold spark-submit JVM costs ~20 s of CPU).
    with caplog.at_level(logging.INFO, logger="reprocess.runner.evaluate"):
        run_spark_stage(spec, plan.run_id, batch_size=60)
    assert "already committed: resuming after it" in caplog.text
    after = _batches(engine, plan.run_id)
    assert len(after) == n and all(state == "committed" for _, state, _ in after)
    assert all(at == before[k] for k, _, at in after if k in before)

    result = commit_stored(engine, spec, plan.run_id)
    assert result.records_read == len(produced.messages)
    expected = {k: (s, str(Decimal(a).normalize()), p, o) for k, (s, a, p, o) in oracle.expected_rows(produced).items()}
    assert target_rows(engine, spec) == expected
    assert dead_letter_count(engine, spec) == len(demo_data.MALFORMED)
    assert ledger(engine, spec) == log_ends(produced)  # from the broker's delivery reports, not the plan


def test_a_cleared_batched_run_keeps_its_plan_and_cut_and_commits_only_when_its_batches_cover_it(
    kafka_config, engine, unique_name
):
    """Issue 39 item 3: clearing a batched DAG run re-runs its planning task; a new plan split afresh
    (more records since, another batch_size) beside the children kept by index left a slice unread
    while the parent committed, or left the parent stuck. The oracle reads run_ranges with SQL."""
    from reprocess.core.stages import CutBatches
    from reprocess.runner.evaluate import RunContext, evaluate
    from reprocess.runner.start import start_run

    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(25, 1))
    _, stages = start_run(engine, kafka_config, spec, RunRequest.from_params({"batch_size": 10}), unique_name)
    (cut,) = [s for s in stages if isinstance(s, CutBatches)]
    evaluate((cut,), RunContext(engine, spec))  # the Spark task's first stage records the batches
    planned = _ranges(engine, unique_name)
    children = [_ranges(engine, f"{unique_name}#{k}") for k in range(len(cut.batches))]
    ((partition, start, end),) = planned
    assert (partition, start) == (0, 0) and end > 20
    assert children == [[(0, a, min(a + 10, end))] for a in range(0, end, 10)]

    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(30, 1, seed=8))  # the log grows
    _, again = start_run(engine, kafka_config, spec, RunRequest.from_params({"batch_size": 7}), unique_name)
    assert _ranges(engine, unique_name) == planned  # the cleared run keeps its plan...
    (recut,) = [s for s in again if isinstance(s, CutBatches)]
    assert [[(r.partition, r.start, r.end) for r in b] for b in recut.batches] == children  # ...and its cut

    # A cut that does not cover the plan (batches of another plan) never commits the parent.
    with engine.begin() as conn:
        conn.execute(text("UPDATE reprocess.run_ranges SET end_offset = 18 WHERE run_id = :c"),
                     {"c": f"{unique_name}#1"})  # fmt: skip
        conn.execute(text("UPDATE reprocess.runs SET state = 'committed' WHERE parent_run_id = :r"), {"r": unique_name})
        conn.execute(text("UPDATE reprocess.runs SET state = 'staged' WHERE run_id = :r"), {"r": unique_name})
    with pytest.raises(Exception, match=r"batches do not cover its plan exactly on .*\[0\]; nothing was committed"):
        commit_stored(engine, spec, unique_name)
    with engine.connect() as conn:
        state = conn.execute(text("SELECT state FROM reprocess.runs WHERE run_id = :r"), {"r": unique_name}).scalar()
    assert state == "staged"
