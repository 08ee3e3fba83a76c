"""Reconciliation compares values: rows changed by direct SQL are found (keys and columns named) and healed.

On real Kafka, Spark and Postgres. The produced messages say what every row must hold (the
oracle, which imports nothing of the product); 10 rows of a correct table get another status or
amount by SQL, lineage untouched, which the lineage check alone answers ok. The next check finds
exactly them, its heal conf re-derives exactly them, and a plan over that range agrees with it.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import text

from reprocess.core.errors import ReconciliationGap
from reprocess.core.runs import HEALS_WINDOW, RunRequest
from reprocess.kafka import demo_data
from reprocess.operations import coverage
from reprocess.operations.preview import load_report
from reprocess.postgres import store
from tests.support import oracle
from tests.support.helpers import PAYMENTS_SPEC, backfill, orders_spec, plan_stage_commit, reconcile_over_connect

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
BASE = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = (BASE, BASE + timedelta(days=1))
CORRUPTED = 10


def _expected(produced) -> dict[str, tuple[str, Decimal]]:
    """payment_id → (status, amount) of its highest version, from the messages alone."""
    import json

    values = {(p, o): json.loads(v) for p, o, _k, v in produced.messages}
    return {
        key: (values[(p, o)]["status"], Decimal(values[(p, o)]["amount"]))
        for key, (_v, p, o) in oracle.expected_by_version(produced, "payment_id").items()
    }


def _stored(engine, spec) -> dict[str, tuple[str, Decimal]]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT payment_id, status, amount FROM {spec.qualified_target}")).all()
    return {r[0]: (r[1], Decimal(r[2])) for r in rows}


def test_rows_changed_by_sql_are_a_value_gap_naming_keys_and_columns_and_its_heal_rederives_exactly_them(
    kafka_config, engine, unique_name
):
    spec = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(
        kafka_config, unique_name, 2, demo_data.payment_events(400), malformed=(), base_time=BASE
    )
    expected = _expected(produced)
    backfill(engine, kafka_config, spec, f"{unique_name}-load")
    assert _stored(engine, spec) == expected

    # A correct table stays ok.
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c1"))

    # 10 rows changed outside the product: 6 statuses, 4 amounts; lineage untouched.
    keys = sorted(expected)[:CORRUPTED]
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {spec.qualified_target} SET status = 'wrong' WHERE payment_id = ANY(:k)"),
                     {"k": keys[:6]})  # fmt: skip
        conn.execute(text(f"UPDATE {spec.qualified_target} SET amount = amount + 1 WHERE payment_id = ANY(:k)"),
                     {"k": keys[6:]})  # fmt: skip
    with pytest.raises(ReconciliationGap) as gap:
        reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c2")
    message = str(gap.value)
    assert "rows differ from what their newest record derives" in message, message
    with engine.connect() as conn:
        details = conn.execute(
            text("SELECT detail FROM reprocess.reconciliations WHERE pipeline = :p AND verdict = 'gap'"),
            {"p": spec.name},
        ).scalars().all()  # fmt: skip
    counted = sum(int(d.split(" rows differ")[0].rsplit(" ", 1)[-1]) for d in details if "rows differ" in d)
    assert counted == CORRUPTED, details
    assert all("stored" in d and "derived" in d for d in details)
    assert any(k in " ".join(details) for k in keys)
    # The calendar, `reprocess status` and the coverage page's data label it as its own kind.
    with engine.connect() as conn:
        cells = coverage.calendar(conn, spec.name)
    assert {c.kinds for c in cells if c.verdict == "gap"} == {("values differ",)}
    status = subprocess.run([sys.executable, "-m", "reprocess.cli", "status", spec.name], capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    gaps = sum(c.verdict == "gap" for c in cells)
    assert f"{gaps} gap (values differ {gaps})" in status.stdout, status.stdout + status.stderr
    assert "gap [values differ]: " in status.stdout
    print(status.stdout)

    # A plan over the heal conf's range agrees with the check: exactly those rows, per column.
    conf = gap.value.heal_conf
    assert conf[HEALS_WINDOW]
    ranges = {k: conf[k] for k in ("start_mode", "start_value", "end_mode", "end_value")}
    preview = RunRequest.from_params({**ranges, "preview": True})
    plan_stage_commit(engine, kafka_config, spec, preview, f"{unique_name}-p")
    with engine.connect() as conn:
        report = load_report(conn, f"{unique_name}-p")
    assert report is not None
    assert report["total"]["updated"] == CORRUPTED
    assert report["columns"] == {"status": 6, "amount": 4}
    assert {s["key"]["payment_id"] for s in report["samples"]["updated"]} == set(keys)

    # The heal conf re-derives exactly those rows; the next check is ok.
    plan_stage_commit(engine, kafka_config, spec, RunRequest.from_params(dict(ranges)), f"{unique_name}-heal")
    with engine.connect() as conn:
        healed = store.committed_counts(conn, f"{unique_name}-heal")
    assert (healed.rows_rederived, healed.rows_inserted, healed.rows_upserted) == (CORRUPTED, 0, CORRUPTED)
    assert _stored(engine, spec) == expected
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c3"))
    with engine.connect() as conn:
        healed_cells = [c for c in coverage.calendar(conn, spec.name) if c.verdict == "healed"]
    assert healed_cells and all(c.as_dict()["kinds"] == ["values differ"] for c in healed_cells)
