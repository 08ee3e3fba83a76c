"""Deliberate resets of a pipeline's ledger: dry run, execute with audit and mirror, fencing, the DAG form.

Expected positions are recomputed here from the produced messages' own timestamps and offsets.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
from sqlalchemy import text

from reprocess.cli.main import main
from reprocess.core.errors import FencedRunError, SpecError
from reprocess.core.runs import EndMode, RunKind, RunRequest, StartMode
from reprocess.kafka import demo_data
from reprocess.postgres import queries
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import create_stage
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import group_offsets, ledger, log_ends, orders_spec, run_dag

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]
BASE = datetime(2026, 11, 1, tzinfo=UTC)


def _first_at_or_after(produced: demo_data.Produced, partition: int, ts: datetime, end: int) -> int:
    ms = int(ts.timestamp() * 1000)
    return min((o for (p, o), t in produced.timestamps.items() if p == partition and t >= ms), default=end)


def _stage_empty(engine, db_url, spec, run_id: str) -> None:
    with psycopg2.connect(libpq_url(db_url)) as pg:
        create_stage(pg, spec, run_id)
    with engine.begin() as conn:
        conn.execute(queries.MARK_STAGED, {"run_id": run_id, "stage_rows": 0})


def test_reset_to_datetime_dry_run_then_execute_audits_mirrors_and_fences(
    kafka_config, engine, db_url, unique_name, capsys
):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(60, 3), malformed=(),
                                 base_time=BASE)  # fmt: skip
    ends = log_ends(produced)
    when = BASE + timedelta(seconds=70)
    expected = {p: _first_at_or_after(produced, p, when, ends[p]) for p in (0, 1)}
    # The pipeline has consumed everything: an incremental plan is committed at the log ends.
    first = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-0")
    _stage_empty(engine, db_url, spec, first.run_id)
    commit_stored(engine, spec, first.run_id)
    assert ledger(engine, spec) == ends

    # Dry run: a table, nothing changed.
    assert main(["reset", spec.name, "--to-datetime", when.isoformat(), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert dry.startswith(f"DRY RUN (nothing changed; add --execute to apply): reset {spec.name}")
    for p in (0, 1):
        line = next(x for x in dry.splitlines() if x.split()[:2] == [unique_name, str(p)])
        cells = line.split()
        assert cells[2:6] == ["0", str(ends[p]), str(ends[p]), str(expected[p])], line
        assert f"[{expected[p]}, {ends[p]}) = {ends[p] - expected[p]} offsets" in line
    assert ledger(engine, spec) == ends

    # A zombie incremental planned before the reset must not commit after it.
    zombie = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-z")
    _stage_empty(engine, db_url, spec, zombie.run_id)

    assert main(["reset", spec.name, "--to-datetime", when.isoformat(), "--execute", "--reason", "re-read",
                 "--by", "alice"]) == 0  # fmt: skip
    assert capsys.readouterr().out.startswith("EXECUTED")
    assert ledger(engine, spec) == expected
    assert group_offsets(kafka_config, spec.consumer_group, spec.topics[0], 2) == expected
    with engine.connect() as conn:
        audit = conn.execute(
            text("SELECT partition, old_offset, new_offset, mode, reason, requested_by FROM reprocess.ledger_resets "
                 "WHERE pipeline = :p ORDER BY partition"), {"p": spec.name}
        ).all()  # fmt: skip
    assert [tuple(a) for a in audit] == [
        (p, ends[p], expected[p], "to-datetime", "re-read", "alice") for p in (0, 1)
    ]  # fmt: skip
    if any(expected[p] != ends[p] for p in (0, 1)):
        with pytest.raises(FencedRunError):
            commit_stored(engine, spec, zombie.run_id)

    # The next incremental starts where the reset put it.
    request = RunRequest(RunKind.INCREMENTAL, StartMode.LEDGER, EndMode.LATEST, dry_run=True)
    after = snapshot_and_migrate(engine, kafka_config, spec, request, f"{unique_name}-1")
    assert {r.partition: (r.start, r.end) for r in after.ranges} == {p: (expected[p], ends[p]) for p in (0, 1)}

    # --shift-by is relative to the ledger and clamped to the log.
    assert main(["reset", spec.name, "--shift-by", "-1000", "--partitions", "1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.split()[:2] == [unique_name, "1"])
    assert line.split()[4:6] == [str(expected[1]), "0"] and "clamped to the log start" in line
    assert main(["reset", spec.name, "--to-latest", "--execute"]) == 1  # no reason: refused
    assert ledger(engine, spec) == expected


def test_recreated_topic_error_names_the_reset_and_the_reset_dag_applies_it(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(20, 2), malformed=())
    ends = log_ends(produced)
    snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({"dry_run": True}), f"{unique_name}-d")
    with engine.begin() as conn:  # as if the topic had been re-created: the ledger is beyond its log end
        conn.execute(queries.RESET_LEDGER, {"pipeline": spec.name, "topic": unique_name, "partition": 1,
                                            "new": ends[1] + 500, "run_id": "old-topic"})  # fmt: skip
    with pytest.raises(SpecError, match=rf"`reprocess reset {spec.name} --topic {unique_name} --partitions 1"):
        snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")

    dr = run_dag(spec, "reset", {"mode": "to-earliest", "partitions": [1], "execute": True, "reason": "recreated"})

    assert dr.state == "success"
    assert ledger(engine, spec) == {1: 0}
    with engine.connect() as conn:
        by, old = conn.execute(
            text("SELECT requested_by, old_offset FROM reprocess.ledger_resets WHERE pipeline = :p"), {"p": spec.name}
        ).one()
    assert by == "dag_test" and old == ends[1] + 500  # dag.test() triggers as "dag_test"
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-2")
    assert {r.partition: (r.start, r.end) for r in plan.ranges} == {0: (0, ends[0]), 1: (0, ends[1])}
