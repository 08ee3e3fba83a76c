"""Re-derive on replay: a backfill rewrites exactly the rows whose derived content differs.

The issue's case on real Kafka, Spark and Postgres: rows of a version-ordered payments table are
given a wrong ``status`` (what a buggy earlier transform would have written, lineage untouched),
then the full backfill runs again. The oracle is recomputed from the produced messages.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from reprocess.kafka import demo_data
from reprocess.operations.summary import format_summary, run_summary
from tests.support import oracle
from tests.support.helpers import PAYMENTS_SPEC, backfill, corrupt_rows, orders_spec

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
CORRUPTED = 100


def _oracle(produced) -> dict[str, tuple[str, int, int, int]]:
    """payment_id → (status, version, partition, offset) of its highest version (ties by offset)."""
    values = {(p, o): json.loads(v) for p, o, _k, v in produced.messages}
    return {
        key: (values[(p, o)]["status"], version, p, o)
        for key, (version, p, o) in oracle.expected_by_version(produced, "payment_id").items()
    }


def _target(engine, spec) -> dict[str, tuple]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT payment_id, status, version, _kafka_partition, _kafka_offset, _updated_at "
                 f"FROM {spec.qualified_target}")
        ).all()  # fmt: skip
    return {r[0]: tuple(r[1:]) for r in rows}


def test_backfill_rederives_exactly_the_corrupted_rows_and_a_plain_replay_changes_nothing(
    kafka_config, engine, unique_name
):
    spec = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.payment_events(1500), malformed=())
    expected = _oracle(produced)
    first = backfill(engine, kafka_config, spec, f"{unique_name}-1")
    assert first.rows_inserted == len(expected) and first.rows_rederived == 0
    loaded = _target(engine, spec)
    assert {k: v[:4] for k, v in loaded.items()} == expected

    # A replay with an unchanged spec changes nothing: no row written, same count, same _updated_at.
    replay = backfill(engine, kafka_config, spec, f"{unique_name}-2")
    assert (replay.rows_upserted, replay.rows_rederived) == (0, 0)
    assert replay.records_read == len(produced.messages)
    assert _target(engine, spec) == loaded

    # What a buggy earlier transform would have written: wrong status, lineage untouched.
    corrupted = corrupt_rows(engine, spec, "payment_id", "status = 'wrong'", CORRUPTED)
    assert len(corrupted) == CORRUPTED

    fixed = backfill(engine, kafka_config, spec, f"{unique_name}-3")

    assert (fixed.rows_upserted, fixed.rows_inserted, fixed.rows_rederived) == (CORRUPTED, 0, CORRUPTED)
    after = _target(engine, spec)
    assert {k: v[:4] for k, v in after.items()} == expected
    assert {k for k in after if after[k][4] != loaded[k][4]} == corrupted  # only those rows were touched
    summary = run_summary(engine, spec.name, fixed.run_id, spec=spec)
    assert (summary["rows_rederived"], summary["rows_newer"], summary["rows_inserted"]) == (CORRUPTED, 0, 0)
    assert f"rows upserted: {CORRUPTED} (0 new, 0 newer, {CORRUPTED} re-derived)" in format_summary(summary)
    print(format_summary(summary))
