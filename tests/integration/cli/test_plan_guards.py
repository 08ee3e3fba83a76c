"""Plan and apply guards (review V finding 9): a plan is applied only while it still describes the apply.

- a plan whose apply would be refused (a dead-letter ratio over the spec's threshold) is an error for
  ``--detailed-exitcode`` (1, as Terraform's), and applying it is refused;
- a plan is stale after any other run's commit to its target, even one that moves no ledger position
  the plan started at (a backfill of an older slice), but never after its own apply's batches: a
  cleared apply cut into batches resumes under the same run id, its own ledger moves exempt.

Both stage their records by hand (no Spark) as test_plan's tombstone case does; the staleness case
checks against a real topic's log start. The exit code is the `reprocess plan` command's own
(``reprocess.cli.plan.exit_code``); test_plan runs the command itself.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from reprocess.cli.plan import exit_code
from reprocess.core.errors import StalePlanError
from reprocess.core.names import child_run_id
from reprocess.core.ranges import OffsetRange
from reprocess.core.stages import Diff
from reprocess.formats.specs import parse_spec
from reprocess.kafka import demo_data
from reprocess.operations.preview import diff_run
from reprocess.runner.preview import start_apply
from tests.support.staging import Record, mark_staged, plan_ranges, stage_and_commit, write_stage

pytestmark = [pytest.mark.integration("kafka")]


def test_plan_whose_apply_would_be_refused_exits_1_with_detailed_exitcode_and_its_apply_is_refused(
    engine, db_url, unique_name
):
    spec = parse_spec(
        {"name": unique_name, "topics": [unique_name], "key": ["id"], "columns": {"id": "text", "s": "text"},
         "target_table": f"{unique_name}.items", "max_dead_letter_ratio": 0.01},
        source=f"{unique_name}.yaml",
    )  # fmt: skip
    plan_id = f"{unique_name}-p"  # 5 % of its records are malformed: over the spec's 1 %
    records = [Record(0, o, {"id": f"k{o}", "s": "v"} if o % 20 else None) for o in range(100)]
    plan_ranges(engine, spec, plan_id, "backfill", [OffsetRange(unique_name, 0, 0, 100)])
    mark_staged(engine, plan_id, write_stage(db_url, spec, plan_id, records))
    report = diff_run(engine, spec, Diff(plan_id, rederives=(OffsetRange(unique_name, 0, 0, 100),)))
    assert report["refused"] and report["changes"] == 0, report["refused"]
    assert exit_code(report, detailed=True) == 1  # what `reprocess plan --detailed-exitcode` exits with
    with pytest.raises(StalePlanError, match="showed its apply refused"):
        start_apply(engine, {}, spec, plan_id, f"{unique_name}-apply")
    with engine.connect() as conn:
        started = conn.execute(text("SELECT count(*) FROM reprocess.runs WHERE run_id = :r"),
                               {"r": f"{unique_name}-apply"}).scalar()  # fmt: skip
    assert started == 0  # nothing started


def test_plan_is_stale_after_another_runs_commit_to_its_target_but_not_after_its_own_applys_batches(
    kafka_config, engine, db_url, unique_name
):
    spec = parse_spec(
        {"name": unique_name, "topics": [unique_name], "key": ["id"], "columns": {"id": "text", "s": "text"},
         "target_table": f"{unique_name}.items"},
        source=f"{unique_name}.yaml",
    )  # fmt: skip
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, ((f"k{i}", {"id": f"k{i}"}) for i in range(30)), malformed=())
    first = [Record(0, o, {"id": f"k{o}", "s": "first"}) for o in range(10, 14)]
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", first)  # the ledger is at 14 now

    # A plan of the range from the ledger: [14, 20).
    plan_id, apply_id = f"{unique_name}-p", f"{unique_name}-apply"
    planned = [Record(0, o, {"id": f"k{o}", "s": "planned"}) for o in range(14, 20)]
    plan_ranges(engine, spec, plan_id, "backfill", [OffsetRange(unique_name, 0, 14, 20)])
    with engine.begin() as conn:
        conn.execute(text("""UPDATE reprocess.runs SET request = '{"parsed": {"start_mode": "ledger"}}'"""
                          " WHERE run_id = :r"), {"r": plan_id})  # fmt: skip
    mark_staged(engine, plan_id, write_stage(db_url, spec, plan_id, planned))
    diff_run(engine, spec, Diff(plan_id, rederives=(OffsetRange(unique_name, 0, 14, 20),)))

    start_apply(engine, kafka_config, spec, plan_id, apply_id)  # fresh
    # Its first batch commits (and moves the ledger the plan started at), then the apply is cleared:
    # it resumes under the same run id, so its own commit leaves the plan fresh.
    stage_and_commit(engine, db_url, spec, child_run_id(apply_id, 0), planned[:3])
    start_apply(engine, kafka_config, spec, plan_id, apply_id)
    with pytest.raises(StalePlanError, match=f"1 other run\\(s\\) committed .*{child_run_id(apply_id, 0)}"):
        start_apply(engine, kafka_config, spec, plan_id, f"{unique_name}-another-apply")

    # Another backfill rewrites an older slice: the ledger stays where the apply moved it, yet the
    # table is not the one the plan diffed.
    stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [Record(0, 11, {"id": "k11", "s": "second"})])
    with pytest.raises(StalePlanError, match=f"1 other run\\(s\\) committed .*{unique_name}-2"):
        start_apply(engine, kafka_config, spec, plan_id, apply_id)
