"""Plans (``reprocess plan``): what a replay will change, counted before it writes, then applied exactly.

On real Kafka, Spark and Postgres: a plan reads as a run does and diffs in a transaction rolled
back, so the target's checksum, the ledger and the dead letters are the same before and after it;
the apply that follows changes exactly what the plan counted. The expected counts are recomputed
from the produced messages by the oracle (tests/support/oracle.py), which imports nothing of the
product; the tombstone case stages its records by hand (no Spark), as test_tombstones does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy import text

from reprocess.core.errors import StalePlanError
from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunRequest
from reprocess.core.stages import Diff
from reprocess.formats.specs import parse_spec
from reprocess.kafka import demo_data
from reprocess.operations.plan_report import format_plan
from reprocess.operations.preview import diff_run, load_report
from reprocess.postgres import store
from reprocess.runner.preview import start_apply
from tests.support import oracle
from tests.support.helpers import (
    PAYMENTS_SPEC,
    corrupt_rows,
    ledger,
    loaded_payments,
    orders_spec,
    plan_stage_commit,
    run_spark_stage,
    stage_count,
)
from tests.support.staging import Record, mark_staged, plan_ranges, stage_and_commit, write_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
CORRUPTED = 10
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"  # the checksum of a table with no rows


def _checksum(engine, spec) -> tuple[Any, ...]:
    """The target's rows, the dead letters and the ledger, as one comparable value."""
    with engine.connect() as conn:
        exists = conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": spec.qualified_target}).scalar()
        rows = conn.execute(
            text(f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                 f"FROM {spec.qualified_target} t")
        ).one() if exists else (0, EMPTY_MD5)  # fmt: skip
        dead = conn.execute(
            text("SELECT count(*) FROM reprocess.dead_letters WHERE pipeline = :p"), {"p": spec.name}
        ).scalar()
    return (*rows, dead, ledger(engine, spec))


def _plan(engine, kafka, spec, plan_id: str, **params: Any) -> dict[str, Any]:
    """A plan as `reprocess plan` makes one: the run's stages, Read then Diff."""
    before = _checksum(engine, spec)
    plan_stage_commit(engine, kafka, spec, RunRequest.from_params({**params, "preview": True}), plan_id)
    assert _checksum(engine, spec) == before  # a plan writes nothing
    with engine.connect() as conn:
        report = load_report(conn, plan_id)
        assert store.run_state(conn, plan_id) == "dry_run"
    assert stage_count(engine, spec, plan_id) is None  # the stage is dropped
    assert report is not None
    print(json.dumps({k: report[k] for k in ("total", "columns", "apply", "changes")}))
    return report


def _apply(engine, kafka, spec, plan_id: str, run_id: str) -> dict[str, int]:
    """The plan applied as `reprocess apply` does; the committed run's counts."""
    _, stages = start_apply(engine, kafka, spec, plan_id, run_id)
    if any(type(s).__name__ == "Read" for s in stages):
        from reprocess.core.stages import for_task
        from reprocess.core.tasks import Task
        from reprocess.runner.evaluate import RunContext, evaluate

        run_spark_stage(spec, run_id, kafka=kafka)
        evaluate(for_task(stages, Task.COMMIT), RunContext(engine, spec))
    with engine.connect() as conn:
        row = store.committed_counts(conn, run_id)
    return {name: getattr(row, name) or 0 for name in store.RUN_COUNTS}


def test_plan_of_corrupted_rows_counts_them_per_column_and_its_apply_heals_exactly_them(
    kafka_config, engine, unique_name
):
    spec, produced = loaded_payments(engine, kafka_config, unique_name, 2, 600)
    expected = oracle.expected_by_version(produced, "payment_id")

    same = _plan(engine, kafka_config, spec, f"{unique_name}-p1")
    assert same["changes"] == 0
    assert same["total"]["unchanged"] == len(expected)
    assert sum(same["total"][k] for k in ("inserted", "updated", "deleted", "rewritten")) == 0

    corrupted = corrupt_rows(engine, spec, "payment_id", "status = 'wrong'", CORRUPTED)
    planned = _plan(engine, kafka_config, spec, f"{unique_name}-p2")
    assert planned["total"]["updated"] == CORRUPTED and planned["columns"] == {"status": CORRUPTED}
    assert {s["key"]["payment_id"] for s in planned["samples"]["updated"]} == corrupted
    assert all(s["changes"]["status"][0] == "wrong" for s in planned["samples"]["updated"])
    assert sum(p["kinds"]["updated"] for p in planned["partitions"]) == CORRUPTED

    applied = _apply(engine, kafka_config, spec, f"{unique_name}-p2", f"{unique_name}-apply")
    assert applied == planned["apply"]
    assert (applied["rows_rederived"], applied["rows_inserted"]) == (CORRUPTED, 0)
    with engine.connect() as conn:
        rows = dict(conn.execute(text(f"SELECT payment_id, version FROM {spec.qualified_target}")).all())
    assert rows == {k: v for k, (v, _p, _o) in expected.items()}

    with pytest.raises(StalePlanError, match="applied already"):
        start_apply(engine, kafka_config, spec, f"{unique_name}-p2", f"{unique_name}-again")


def test_stale_plan_is_refused_naming_the_spec_change(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC)
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, demo_data.payment_events(50), malformed=())
    _plan(engine, kafka_config, spec, f"{unique_name}-p")
    changed = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC, ordering={"mode": "offset"})
    with pytest.raises(StalePlanError, match="the spec changed"):
        start_apply(engine, kafka_config, changed, f"{unique_name}-p", f"{unique_name}-apply")
    with engine.connect() as conn:
        assert store.run_state(conn, f"{unique_name}-apply") is None  # nothing started


def test_plan_of_a_fresh_table_counts_inserts_and_dead_letters_as_its_apply_does(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(300, 3))
    planned = _plan(engine, kafka_config, spec, f"{unique_name}-p")
    assert planned["total"]["inserted"] == len(oracle.expected_rows(produced))
    assert planned["total"]["dead_letters"] == oracle.invalid_count(produced) > 0
    assert planned["changes"] > 0
    applied = _apply(engine, kafka_config, spec, f"{unique_name}-p", f"{unique_name}-apply")
    assert applied == planned["apply"]
    assert applied["rows_inserted"] == planned["total"]["inserted"]
    assert applied["dead_letters_new"] == planned["total"]["dead_letters"]


def test_plan_counts_tombstone_deletes_and_older_records_refused_as_the_commit_then_does(engine, db_url, unique_name):
    spec = parse_spec(
        {"name": unique_name, "topics": [unique_name], "key": ["id"], "columns": {"id": "text", "s": "text"},
         "tombstones": "delete", "target_table": f"{unique_name}.items", "max_dead_letter_ratio": 0.5},
        source=f"{unique_name}.yaml",
    )  # fmt: skip
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [Record(0, o, {"id": k, "s": f"{k}{o}"})
                                                                for o, k in enumerate("abcd", start=10)])  # fmt: skip
    # a and b deleted by tombstones, c rewritten by an older record (refused), e new.
    records = [
        Record(0, 20, {"id": "a"}, tombstone=True),
        Record(0, 21, {"id": "b"}, tombstone=True),
        Record(0, 5, {"id": "c", "s": "old"}),
        Record(0, 22, {"id": "e", "s": "e22"}),
        Record(0, 23, None),
    ]
    before = _checksum(engine, spec)
    plan_ranges(engine, spec, f"{unique_name}-p", "backfill", [OffsetRange(unique_name, 0, 5, 24)])
    mark_staged(engine, f"{unique_name}-p", write_stage(db_url, spec, f"{unique_name}-p", records))
    report = diff_run(engine, spec, Diff(f"{unique_name}-p", rederives=(OffsetRange(unique_name, 0, 5, 24),)))
    assert _checksum(engine, spec) == before
    assert {k: report["total"][k] for k in ("deleted", "refused", "inserted", "dead_letters")} == {
        "deleted": 2, "refused": 1, "inserted": 1, "dead_letters": 1}  # fmt: skip
    applied = stage_and_commit(engine, db_url, spec, f"{unique_name}-2", records)
    assert (applied.rows_deleted, applied.rows_inserted, applied.dead_letters_new) == (2, 1, 1)
    assert {k: getattr(applied, k) for k in report["apply"]} == report["apply"]


def test_a_plan_made_under_one_tombstone_rule_is_stale_under_the_other(engine, db_url, kafka_config, unique_name):
    """Review V finding 8: the plan showed tombstones as dead letters and 0 deletes; applied under
    ``tombstones: delete`` it would delete rows it never showed."""
    raw = {"name": unique_name, "topics": [unique_name], "key": ["id"], "columns": {"id": "text", "s": "text"},
           "target_table": f"{unique_name}.items", "max_dead_letter_ratio": 0.9}  # fmt: skip
    spec = parse_spec(raw, source=f"{unique_name}.yaml")
    demo_data.create_topic(kafka_config, unique_name, 1)
    producer = Producer(kafka_config)
    for value in (b'{"id": "a", "s": "a0"}', None):  # a row, then its key's tombstone
        producer.produce(unique_name, key=b"a", value=value)
    assert producer.flush(30) == 0
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [Record(0, 0, {"id": "a", "s": "a0"})])
    plan_ranges(engine, spec, f"{unique_name}-p", "backfill", [OffsetRange(unique_name, 0, 0, 2)])
    records = [Record(0, 0, {"id": "a", "s": "a0"}), Record(0, 1, None, error="empty value")]  # a's tombstone
    mark_staged(engine, f"{unique_name}-p", write_stage(db_url, spec, f"{unique_name}-p", records))
    report = diff_run(engine, spec, Diff(f"{unique_name}-p", rederives=(OffsetRange(unique_name, 0, 0, 2),)))
    assert (report["total"]["deleted"], report["total"]["dead_letters"]) == (0, 1)
    deletes = parse_spec({**raw, "tombstones": "delete"}, source=f"{unique_name}.yaml")
    with pytest.raises(StalePlanError, match="the spec changed"):
        start_apply(engine, kafka_config, deletes, f"{unique_name}-p", f"{unique_name}-apply")


def test_plan_command_prints_json_writes_the_out_file_and_exits_2_for_changes_0_for_none(
    kafka_config, engine, unique_name, tmp_path
):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    produced = demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(40, 3), malformed=())
    out = tmp_path / "plan.json"

    def plan_command(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reprocess.cli", "plan", spec.name, "--detailed-exitcode",
                               *extra], capture_output=True, text=True, timeout=600)  # fmt: skip

    first = plan_command("--json", "--out", str(out))
    assert first.returncode == 2, first.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["total"]["inserted"] == len(oracle.expected_rows(produced))
    assert json.loads(first.stdout)["plan_id"] == report["plan_id"]
    applied = subprocess.run([sys.executable, "-m", "reprocess.cli", "apply", report["plan_id"]],
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert applied.returncode == 0, applied.stderr[-3000:]
    again = plan_command()
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Plan: 0 to insert, 0 to update, 0 to delete" in again.stdout, again.stdout
    print(again.stdout)


def test_a_plan_that_reads_nothing_is_applied_as_an_empty_run_that_says_so_and_changes_nothing(
    kafka_config, engine, db_url, unique_name
):
    """A plan from the ledger when nothing new arrived (the usual "what would the next run do?") reads
    an empty range. Its apply is the empty run the plan showed: committed, every count 0, the table,
    the dead letters and the ledger as they were; the plan's text says it reads nothing."""
    spec = parse_spec(
        {"name": unique_name, "topics": [unique_name], "key": ["id"], "columns": {"id": "text", "s": "text"},
         "target_table": f"{unique_name}.items"},
        source=f"{unique_name}.yaml",
    )  # fmt: skip
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, ((f"k{i}", {"id": f"k{i}"}) for i in range(6)), malformed=())
    stage_and_commit(
        engine, db_url, spec, f"{unique_name}-1", [Record(0, o, {"id": f"k{o}", "s": "a"}) for o in range(6)]
    )
    report = _plan(engine, kafka_config, spec, f"{unique_name}-p", start_mode="ledger")
    assert report["ranges"] == [[unique_name, 0, 6, 6]] and report["changes"] == 0

    before = _checksum(engine, spec)
    applied = _apply(engine, kafka_config, spec, f"{unique_name}-p", f"{unique_name}-apply")
    assert applied == dict.fromkeys(store.RUN_COUNTS, 0)
    assert _checksum(engine, spec) == before
    with engine.connect() as conn:
        assert store.run_state(conn, f"{unique_name}-apply") == "committed"
    with pytest.raises(StalePlanError, match="applied already"):
        start_apply(engine, kafka_config, spec, f"{unique_name}-p", f"{unique_name}-again")
    assert "reads nothing" in format_plan(report), format_plan(report)
