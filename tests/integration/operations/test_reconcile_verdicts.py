"""Reconciliation's comparison in Postgres (no Spark): the check's stage is written by the
product's own stage writer, in the shape the Spark job stages a window (the newest row and the
newest tombstone per key, every dead letter). Expectations are written out from the records.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from reprocess.core.errors import ReconciliationGap
from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import parse_spec
from reprocess.operations import coverage
from reprocess.operations.reconcile import record_verdicts
from reprocess.postgres.db import SQL_DIR
from reprocess.postgres.target import MARKERS_SCHEMA
from tests.support.staging import Record, stage_and_commit, write_stage

pytestmark = pytest.mark.integration("postgres")

WINDOW = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))


def _spec(name: str, **extra: object) -> PipelineSpec:
    raw = {"name": name, "topics": [name], "key": ["id"], "columns": {"id": "text", "s": "text"},
           "target_table": f"{name}.items", **extra}  # fmt: skip
    return parse_spec(raw, source=f"{name}.yaml")


def _check(engine, db_url, spec, check_id: str, records: list[Record], end: int) -> list[str]:
    write_stage(db_url, spec, check_id, records)
    verdicts = record_verdicts(engine, spec, [OffsetRange(spec.topics[0], 0, 0, end)], *WINDOW, check_id)
    return [v.detail() for v in verdicts]


def test_a_deletion_marker_is_the_state_of_a_deleted_key_and_a_resurrected_row_is_stale(engine, db_url, unique_name):
    spec = _spec(unique_name, tombstones="delete")
    put_a, put_b, del_a, put_c = (
        Record(0, 0, {"id": "a", "s": "a0"}),
        Record(0, 1, {"id": "b", "s": "b1"}),
        Record(0, 2, {"id": "a"}, tombstone=True),
        Record(0, 3, {"id": "c", "s": "c3"}),
    )
    stage_and_commit(engine, db_url, spec, f"{unique_name}-load", [put_a, put_b, del_a, put_c])
    window = [put_a, put_b, del_a, put_c]  # a's newest row and newest tombstone are both staged
    assert _check(engine, db_url, spec, f"{unique_name}-ok", window, 4) == ["3 keys, 0 dead letters, all accounted for"]

    # The key comes back with its OLD row (what a replay without markers would do): stale.
    with engine.begin() as conn:
        conn.execute(text(f'DELETE FROM {MARKERS_SCHEMA}."{spec.name}"'))
        conn.execute(
            text(f"INSERT INTO {spec.qualified_target} (id, s, _kafka_topic, _kafka_partition, _kafka_offset, _run_id) "
                 "VALUES ('a', 'a0', :t, 0, 0, 'replay')"), {"t": spec.topics[0]}
        )  # fmt: skip
    with pytest.raises(ReconciliationGap, match=r"stale: 1 keys whose target row is older than their newest record"):
        _check(engine, db_url, spec, f"{unique_name}-stale", window, 4)


def test_numeric_keys_compare_as_numbers_and_unrecorded_dead_letters_are_a_gap(engine, db_url, unique_name):
    spec = _spec(unique_name, columns={"id": "numeric", "s": "text"}, max_dead_letter_ratio=0.9)
    stage_and_commit(
        engine, db_url, spec, f"{unique_name}-load", [Record(0, 0, {"id": "1.500", "s": "x"}), Record(0, 1, None)]
    )
    # The window's record parses to 1.5: the same key as the stored 1.500.
    window = [Record(0, 0, {"id": "1.5", "s": "x"}), Record(0, 1, None)]
    assert _check(engine, db_url, spec, f"{unique_name}-ok", window, 2) == ["1 keys, 1 dead letters, all accounted for"]

    with engine.begin() as conn:  # the invalid record's dead letter goes missing
        conn.execute(text("DELETE FROM reprocess.dead_letters WHERE pipeline = :p"), {"p": spec.name})
    with pytest.raises(ReconciliationGap, match=r"\[0\] 1 invalid records not in the dead letters"):
        _check(engine, db_url, spec, f"{unique_name}-dead", window, 2)


def test_a_row_whose_ordering_value_is_null_is_stale_not_ok(engine, db_url, unique_name):
    """Issue 25 item 1: with a NULL ordering value the "is the stored row newer" comparison is
    NULL, and reconciliation counted the key as fine although no update could ever replace it."""
    spec = _spec(unique_name, columns={"id": "text", "s": "text", "v": {"type": "bigint", "required": True}},
                 ordering={"mode": "column", "column": "v"})  # fmt: skip
    window = [Record(0, 0, {"id": "a", "s": "a0", "v": 1}), Record(0, 1, {"id": "a", "s": "a1", "v": 7})]
    stage_and_commit(engine, db_url, spec, f"{unique_name}-load", window)
    with engine.begin() as conn:  # the row as an older release left it: an older record, no ordering value
        conn.execute(text(f"ALTER TABLE {spec.qualified_target} ALTER COLUMN v DROP NOT NULL"))
        conn.execute(text(f"UPDATE {spec.qualified_target} SET v = NULL, s = 'a0', _kafka_offset = 0"))
    with pytest.raises(ReconciliationGap, match=r"stale: 1 keys whose target row is older than their newest record"):
        _check(engine, db_url, spec, f"{unique_name}-check", window[1:], 2)


def test_a_verdict_stores_the_kinds_its_checks_found_and_the_calendar_shows_them_as_stored(engine, db_url, unique_name):
    spec = _spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-load", [Record(0, 0, {"id": "a", "s": "a0"})])
    with engine.begin() as conn:  # a person's UPDATE: a value gap; and a key the table never got: missing
        conn.execute(text(f"UPDATE {spec.qualified_target} SET s = 'edited'"))
    window = [Record(0, 0, {"id": "a", "s": "a0"}), Record(0, 1, {"id": "b", "s": "b1"})]
    with pytest.raises(ReconciliationGap):
        _check(engine, db_url, spec, f"{unique_name}-gap", window, 2)
    stored = "SELECT kinds FROM reprocess.{} WHERE pipeline = :p ORDER BY checked_at DESC LIMIT 1"
    with engine.connect() as conn:
        for table in ("reconciliations", "reconciliation_history"):
            kinds = conn.execute(text(stored.format(table)), {"p": spec.name}).scalar_one()
            assert kinds == ["uncovered", "missing", "values differ"], table  # offset 1 was never committed
        # the stored kinds are what the calendar shows, whatever the detail's words say
        conn.execute(text("UPDATE reprocess.reconciliations SET kinds = '{older}' WHERE pipeline = :p"),
                     {"p": spec.name})  # fmt: skip
        (cell,) = coverage.calendar(conn, spec.name)
    assert (cell.verdict, cell.kinds) == ("gap", ("older",))
    assert "keys missing from the target" in (cell.detail or "")


def test_verdicts_recorded_before_the_kinds_column_get_their_kinds_from_the_migration(engine, unique_name):
    details = {
        0: "uncovered offsets [10, 20); 2 keys missing from the target (e.g. a, b)",
        1: "stale: 1 keys whose target row is older than their newest record (e.g. a); 4 rows from spec v1; "
        "current is v2: run a backfill to re-derive",
        2: "1 invalid records not in the dead letters; 3 rows differ from what their newest record derives "
        '(s ×3); e.g. a s: stored "x" vs derived "y"; 2 values incomplete: the connector left them out',
        3: "5 keys, 0 dead letters, all accounted for",
    }
    with engine.begin() as conn:
        for partition, detail in details.items():
            conn.execute(
                text("INSERT INTO reprocess.reconciliations (pipeline, window_start, window_end, topic, partition, "
                     "kafka_start, kafka_end, verdict, detail) VALUES (:p, :ws, :we, 't', :n, 0, 100, :v, :d)"),
                {"p": unique_name, "ws": WINDOW[0], "we": WINDOW[1], "n": partition, "d": detail,
                 "v": "ok" if partition == 3 else "gap"},
            )  # fmt: skip
        conn.exec_driver_sql((SQL_DIR / "024_reconciliation_kinds.sql").read_text())  # as migrate applies it
        kinds = dict(
            conn.execute(text("SELECT partition, kinds FROM reprocess.reconciliations WHERE pipeline = :p"),
                         {"p": unique_name}).all()
        )  # fmt: skip
    assert kinds == {
        0: ["uncovered", "missing"],
        1: ["older", "spec version"],
        2: ["dead letters unrecorded", "values differ", "values incomplete"],
        3: [],
    }
