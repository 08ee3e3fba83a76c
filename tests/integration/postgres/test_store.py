"""The store guards a run's plan: once staged, no planning attempt rewrites its ranges (real Postgres)."""

from __future__ import annotations

from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunKind, RunState
from reprocess.postgres import store
from tests.support.staging import mark_staged, ordering_spec, plan_ranges


def _ranges(engine, run_id):
    with engine.connect() as conn:
        return store.load_ranges(conn, run_id).ranges


def test_a_zombie_plan_attempt_cannot_rewrite_a_staged_runs_ranges(engine, unique_name):
    spec = ordering_spec(unique_name, "offset")
    run_id = f"{unique_name}-1"
    staged = (OffsetRange(unique_name, 0, 0, 10),)
    plan_ranges(engine, spec, run_id, "backfill", staged)
    # While only planned, a second attempt may re-plan (e.g. after a failed snapshot).
    replanned = (OffsetRange(unique_name, 0, 0, 12),)
    plan_ranges(engine, spec, run_id, "backfill", replanned)
    assert _ranges(engine, run_id) == replanned
    mark_staged(engine, run_id, 3)

    # The zombie attempt of the plan task (or a retry racing the Spark job) plans [0, 99):
    # nothing is written, the stored plan is handed back and the run stays staged.
    with engine.begin() as conn:
        kept = store.save_ranges(
            conn, spec, RunKind.BACKFILL, {}, run_id, state=RunState.FAILED,
            ranges=[OffsetRange(unique_name, 0, 0, 99)], error="snapshot failed",
        )  # fmt: skip
    assert kept is not None and kept.ranges == replanned
    assert _ranges(engine, run_id) == replanned
    with engine.connect() as conn:
        assert store.run_state(conn, run_id) is RunState.STAGED
