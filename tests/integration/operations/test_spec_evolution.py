"""Spec versions on every row, a nullable column added in place, and changes that need a rebuild.

The expected rows come from the produced messages (tests/support/oracle.py), never from the code under test.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import psycopg2
import pytest
import yaml
from sqlalchemy import text

from reprocess.core.errors import FencedRunError, ReconciliationGap, SchemaChangeError
from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunRequest
from reprocess.core.stages import Migrate
from reprocess.kafka import demo_data
from reprocess.operations.summary import run_summary
from reprocess.postgres import queries
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import create_stage
from reprocess.runner.evaluate import RunContext, evaluate
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support import oracle
from tests.support.helpers import ORDERS_SPEC, orders_spec, reconcile_over_connect, run_dag, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
BASE = datetime(2026, 11, 1, tzinfo=UTC)


def _columns(**changes) -> dict:
    columns = yaml.safe_load(ORDERS_SPEC.read_text())["columns"]
    for name, col in changes.items():
        if col is None:
            columns.pop(name)
        else:
            columns[name] = col
    return columns


def _table(engine, spec) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(
            conn.execute(
                text("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = :s "
                     "AND table_name = :t"), {"s": spec.target_schema, "t": spec.target_table}
            ).all()
        )  # fmt: skip


def _versions(engine, spec) -> tuple[int, list[int], dict[int, int]]:
    with engine.connect() as conn:
        live = conn.execute(text("SELECT spec_version FROM reprocess.pipelines WHERE name = :p"), {"p": spec.name})
        history = conn.execute(
            text("SELECT version FROM reprocess.spec_versions WHERE pipeline = :p ORDER BY version"), {"p": spec.name}
        )
        rows = conn.execute(text(f"SELECT _spec_version, count(*) FROM {spec.qualified_target} GROUP BY 1"))
        return live.scalar_one(), list(history.scalars()), dict(rows.all())


def test_added_column_is_altered_in_place_and_older_rows_are_reported_until_rebuilt(
    kafka_config, engine, db_url, unique_name
):
    v1 = orders_spec(unique_name, unique_name, columns=_columns(currency=None))
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(80, 3), malformed=(),
                                 base_time=BASE)  # fmt: skip
    keys = len(oracle.expected_rows(produced))
    plan = snapshot_and_migrate(engine, kafka_config, v1, RunRequest.from_params({}), f"{unique_name}-1")
    run_spark_stage(v1, plan.run_id)
    commit_stored(engine, v1, plan.run_id)
    assert _versions(engine, v1) == (1, [1], {1: keys})
    assert "currency" not in _table(engine, v1)

    # v2 adds a nullable column: planning registers v2 (a dry run: nothing more), and a run's
    # Migrate stage alters the table.
    v2 = orders_spec(unique_name, unique_name)
    assert v2.fingerprint != v1.fingerprint
    snapshot_and_migrate(engine, kafka_config, v2, RunRequest.from_params({"dry_run": True}), f"{unique_name}-2")
    assert "currency" not in _table(engine, v2)
    evaluate([Migrate(f"{unique_name}-2")], RunContext(engine, v2))
    assert _table(engine, v2)["currency"] == "text"
    assert _versions(engine, v2) == (2, [1, 2], {1: keys})
    summary = run_summary(engine, v2.name, f"{unique_name}-1", spec=v2)
    assert summary["stale_message"] == f"{keys:,} rows from spec v1; current is v2: run a backfill to re-derive"
    with pytest.raises(ReconciliationGap, match="rows from spec v1; current is v2"):
        reconcile_over_connect(engine, v2, BASE, datetime(2026, 11, 2, tzinfo=UTC), f"{unique_name}-check")

    # A backfill fills the new column: every row is re-derived from the same record under v2.
    plan = snapshot_and_migrate(engine, kafka_config, v2, RunRequest.from_params({}), f"{unique_name}-2b")
    run_spark_stage(v2, plan.run_id)
    result = commit_stored(engine, v2, plan.run_id)
    assert (result.rows_rederived, result.rows_inserted) == (keys, 0)
    values = {(p, o): json.loads(v) for p, o, _k, v in produced.messages}
    with engine.connect() as conn:
        currency = dict(conn.execute(text(f"SELECT order_id, currency FROM {v2.qualified_target}")).all())
    assert currency == {
        k: values[(p, o)].get("currency") for k, (_s, _a, p, o) in oracle.expected_rows(produced).items()
    }
    assert _versions(engine, v2) == (2, [1, 2], {2: keys})
    assert run_summary(engine, v2.name, plan.run_id, spec=v2)["stale_message"] == ""

    # A type change cannot be applied in place: planning fails, saying what changed and offering the rebuild.
    v3 = orders_spec(unique_name, unique_name, columns=_columns(items={"type": "bigint"}))
    with pytest.raises(SchemaChangeError, match=r"column items: type integer → bigint.*mode=rebuild"):
        snapshot_and_migrate(engine, kafka_config, v3, RunRequest.from_params({}), f"{unique_name}-3")
    assert _table(engine, v3)["items"] == "integer" and _versions(engine, v3)[0] == 2

    # A dropped column and a new key are refused the same way, and the DAG fails at once (no retry).
    v4 = orders_spec(unique_name, unique_name, key=["order_id", "customer_id"], columns=_columns(items=None))
    dr = run_dag(v4, "backfill")
    assert dr.state == "failed"
    ti = dr.get_task_instance("plan_offsets")
    assert ti.state == "failed" and ti.try_number == 1
    with pytest.raises(SchemaChangeError, match=r"column items: dropped from the spec; key \(order_id\) → "):
        snapshot_and_migrate(engine, kafka_config, v4, RunRequest.from_params({}), f"{unique_name}-4")
    assert _versions(engine, v4)[0] == 2


def test_a_run_planned_under_one_spec_is_not_committed_under_another(kafka_config, engine, db_url, unique_name):
    v1 = orders_spec(unique_name, unique_name, columns=_columns(currency=None))
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(10, 2), malformed=())
    plan = snapshot_and_migrate(engine, kafka_config, v1, RunRequest.from_params({}), unique_name)
    with psycopg2.connect(libpq_url(db_url)) as pg:
        create_stage(pg, v1, plan.run_id)
    with engine.begin() as conn:
        conn.execute(queries.MARK_STAGED, {"run_id": plan.run_id, "stage_rows": 0})
    v2 = orders_spec(unique_name, unique_name)  # the spec file changed between stage and commit
    snapshot_and_migrate(engine, kafka_config, v2, RunRequest.from_params({"dry_run": True}), f"{unique_name}-dry")
    evaluate([Migrate(f"{unique_name}-dry")], RunContext(engine, v2))  # another run migrates the table to v2

    with pytest.raises(FencedRunError, match=r"planned for spec v1 but .* is at v2 \(migrated or rebuilt since\)"):
        commit_stored(engine, v2, plan.run_id)


def test_a_commit_refused_for_a_spec_change_fails_the_run_with_the_reason_and_drops_its_stage(
    engine, db_url, unique_name
):
    """The spec file changed between stage and commit and the new spec was never planned: the
    commit is refused (SchemaChangeError), and the run must not stay ``staged`` forever with no
    reason while its UNLOGGED stage is kept for a commit that can never come."""
    from tests.support.helpers import runs, stage_count
    from tests.support.staging import Record, mark_staged, plan_ranges, write_stage

    v1 = orders_spec(unique_name, unique_name, columns=_columns(currency=None))
    run_id = f"{unique_name}-1"
    plan_ranges(engine, v1, run_id, "backfill", [OffsetRange(unique_name, 0, 0, 1)])
    order = {"order_id": "o-1", "customer_id": "c", "status": "new", "updated_at": BASE}
    mark_staged(engine, run_id, write_stage(db_url, v1, run_id, [Record(0, 0, order)]))
    v2 = orders_spec(unique_name, unique_name)  # currency added to the file after the stage

    with pytest.raises(SchemaChangeError, match=r"planned under spec v1 but .* is now an unregistered spec"):
        commit_stored(engine, v2, run_id)
    (run,) = runs(engine, v2)
    assert run.state == "failed"
    assert "planned under spec v1" in run.error and "Trigger the run again" in run.error
    assert stage_count(engine, v2, run_id) is None
