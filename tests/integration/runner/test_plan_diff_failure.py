"""A plan whose diff raises ends ``failed`` with the cause, and its stage is dropped (review V finding 12).

Through the real evaluator: a plan staged by hand (no Spark, as test_plan's tombstone case), then its
Diff stage evaluated against a target whose column someone changed by hand, after the planning, to
a type the spec cannot be applied to in place (a real refusal, not a mock). Before, the run stayed
``staged`` and the leftover cleanup kept its stage for ever.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from reprocess.core.ranges import OffsetRange
from reprocess.core.stages import Diff
from reprocess.postgres import store
from reprocess.postgres.stage import drop_leftover_stages
from reprocess.runner.evaluate import RunContext, evaluate
from tests.support.helpers import stage_count
from tests.support.staging import Record, mark_staged, plan_ranges, stage_and_commit, text_spec, write_stage


def test_plan_whose_diff_raises_ends_failed_with_the_cause_and_drops_its_stage(engine, db_url, unique_name):
    spec = text_spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [Record(0, 0, {"id": "a", "s": "1"})])
    plan_id = f"{unique_name}-p"
    plan_ranges(engine, spec, plan_id, "backfill", [OffsetRange(unique_name, 0, 1, 3)])
    records = [Record(0, 1, {"id": "a", "s": "x"}), Record(0, 2, {"id": "b", "s": "y"})]
    mark_staged(engine, plan_id, write_stage(db_url, spec, plan_id, records))
    assert stage_count(engine, spec, plan_id) == 2
    with engine.begin() as conn:  # then someone changes the column's type by hand: "x" cannot be written there
        conn.execute(text(f"ALTER TABLE {spec.qualified_target} ALTER COLUMN s TYPE integer USING s::integer"))

    with pytest.raises(Exception) as raised:
        evaluate([Diff(plan_id)], RunContext(engine, spec))
    print(type(raised.value).__name__, raised.value)

    with engine.connect() as conn:
        state, error = conn.execute(
            text("SELECT state, error FROM reprocess.runs WHERE run_id = :r"), {"r": plan_id}
        ).one()  # fmt: skip
        assert store.run_state(conn, plan_id) == "failed", (state, error)
    assert "integer" in error and "diff failed" in error, error
    assert stage_count(engine, spec, plan_id) is None  # dropped with the failure
    assert drop_leftover_stages(engine, spec) == []
