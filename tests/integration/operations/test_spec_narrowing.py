"""A spec change that stops deriving some rows (a ``where`` added): the command the day's check
names re-derives the window, deletes the rows whose own record the new spec no longer keeps (an
older kept record of the key takes their place), and the plan of that command showed those deletes.

On real Kafka, Spark and Postgres. The expected rows come from the produced messages alone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from reprocess.core.errors import ReconciliationGap
from reprocess.core.runs import RunRequest
from reprocess.core.stages import Migrate
from reprocess.kafka import demo_data
from reprocess.operations.preview import load_report
from reprocess.runner.evaluate import RunContext, evaluate
from reprocess.runner.start import snapshot_and_migrate
from tests.support.helpers import backfill, orders_spec, plan_stage_commit, reconcile_over_connect

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
BASE = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = (BASE, BASE + timedelta(days=1))
COLUMNS = {"id": {"type": "text", "required": True}, "status": "text", "n": "bigint"}
# key, status, n in offset order (one partition): b only ever 'test'; c's newest record is 'test'
# and an older one is kept; e's older record is 'test' and its newest is kept.
EVENTS = [("a", "ok", 1), ("b", "test", 1), ("c", "ok", 1), ("c", "test", 2), ("d", "ok", 1), ("e", "test", 1),
          ("e", "ok", 2)]  # fmt: skip


def _rows(engine, spec) -> dict[str, tuple[str, int, int, int]]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id, status, n, _kafka_offset, _spec_version FROM {spec.qualified_target}"))
        return {r[0]: tuple(r[1:]) for r in rows}


def test_a_where_added_deletes_the_rows_it_filters_through_the_named_backfill_which_its_plan_showed(
    kafka_config, engine, unique_name
):
    settings = {"key": ["id"], "columns": COLUMNS, "ordering": "offset", "max_dead_letter_ratio": 0.5}
    v1 = orders_spec(unique_name, unique_name, **settings)
    demo_data.create_topic(kafka_config, unique_name, 1)
    events = [(k, {"id": k, "status": s, "n": n}) for k, s, n in EVENTS]
    demo_data.produce(kafka_config, unique_name, 1, events, malformed=(), base_time=BASE)
    backfill(engine, kafka_config, v1, f"{unique_name}-v1")
    assert _rows(engine, v1) == {"a": ("ok", 1, 0, 1), "b": ("test", 1, 1, 1), "c": ("test", 2, 3, 1),
                                 "d": ("ok", 1, 4, 1), "e": ("ok", 2, 6, 1)}  # fmt: skip

    v2 = orders_spec(unique_name, unique_name, **settings, where="status <> 'test'")
    snapshot_and_migrate(
        engine, kafka_config, v2, RunRequest.from_params({"dry_run": True}), f"{unique_name}-v2"
    )  # registers v2
    evaluate([Migrate(f"{unique_name}-v2")], RunContext(engine, v2))  # a run's Migrate stage makes v2 live
    with pytest.raises(ReconciliationGap) as gap:
        reconcile_over_connect(engine, v2, *WINDOW, f"{unique_name}-c1")
    message = str(gap.value)
    assert f"rows from spec v1; current is v2: run a backfill to re-derive: trigger {v2.dag_id('backfill')}" in message
    conf = gap.value.heal_conf
    ranges = {k: conf[k] for k in ("start_mode", "start_value", "end_mode", "end_value")}

    # The plan of the named backfill shows b deleted and c going back to its older kept record.
    plan_stage_commit(engine, kafka_config, v2, RunRequest.from_params({**ranges, "preview": True}), f"{unique_name}-p")
    with engine.connect() as conn:
        report = load_report(conn, f"{unique_name}-p")
    assert report is not None
    print({k: report[k] for k in ("total", "columns", "apply")})
    assert (report["total"]["deleted"], report["total"]["updated"]) == (1, 1), report["total"]
    assert [s["key"]["id"] for s in report["samples"]["deleted"]] == ["b"]
    assert report["samples"]["updated"][0]["changes"]["n"] == [2, 1]

    # The backfill does what the plan said; the day's check is ok afterwards.
    plan_stage_commit(engine, kafka_config, v2, RunRequest.from_params(dict(ranges)), f"{unique_name}-heal")
    assert _rows(engine, v2) == {"a": ("ok", 1, 0, 2), "c": ("ok", 1, 2, 2), "d": ("ok", 1, 4, 2),
                                 "e": ("ok", 2, 6, 2)}  # fmt: skip
    assert all(v.ok for v in reconcile_over_connect(engine, v2, *WINDOW, f"{unique_name}-c2"))
