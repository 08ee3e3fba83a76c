"""What the run's report and the window's spec-version check read of the target (issue 58 item 1,
review V finding 10): the report's rows per version come from the counts the commit keeps (no row
of the target read), and the window's check reads the rows of the window's ranges once, whatever
its partition count, not the table once per partition. Counted by PostgreSQL's own per-transaction
table statistics (``pg_stat_xact_user_tables``); expectations from ``GROUP BY`` queries written here.
"""

from __future__ import annotations

from typing import Any

from psycopg2 import sql
from sqlalchemy import Connection, text

from reprocess.checks.base import Window
from reprocess.checks.spec_version import SPEC_VERSIONS
from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import parse_spec
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.evolve import stale_rows
from tests.support.staging import Record, stage_and_commit

PARTITIONS = 6
PER_PARTITION = 5  # records of the window on each partition, offsets [0, 5)
OUTSIDE = 20_000  # rows whose records lie outside the window (later offsets of the same partitions)


def _spec(name: str, *extra: str) -> PipelineSpec:
    return parse_spec(
        {"name": name, "topics": [name], "key": ["id"], "target_table": f"{name}.items",
         "columns": {"id": "text", "s": "text", **dict.fromkeys(extra, "text")}},
        source=f"{name}.yaml",
    )  # fmt: skip


def _rows_read(conn: Connection, spec: PipelineSpec) -> int:
    """Rows of the target this transaction has read so far, by sequential and index scans."""
    return int(
        conn.execute(
            text("SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
                 "WHERE relid = to_regclass(:t)"), {"t": spec.qualified_target}
        ).scalar_one()
    )  # fmt: skip


def _read_by(conn: Connection, spec: PipelineSpec, call: Any) -> tuple[Any, int]:
    before = _rows_read(conn, spec)
    result = call()
    return result, _rows_read(conn, spec) - before


def test_the_report_reads_no_target_row_and_the_window_check_reads_only_the_windows_rows_once(
    engine, db_url, unique_name
):
    v1 = _spec(unique_name)
    window = [Record(p, o, {"id": f"k{p}-{o}", "s": f"v{o}"}) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    stage_and_commit(engine, db_url, v1, f"{unique_name}-1", window)
    table = v1.qualified_target
    with engine.begin() as conn:  # rows written earlier, outside the window: a table far larger than it
        conn.execute(
            text(f"INSERT INTO {table} (id, s, _kafka_topic, _kafka_partition, _kafka_offset, _run_id, _spec_version) "
                 f"SELECT 'old' || i, 's', :topic, i % {PARTITIONS}, 1000 + i, 'earlier', 1 "
                 f"FROM generate_series(1, {OUTSIDE}) i"), {"topic": unique_name}
        )  # fmt: skip
        conn.execute(text(f"ANALYZE {table}"))
    # v2 re-derives partition 0's records: the other partitions' window rows stay v1's.
    v2 = _spec(unique_name, "t")
    stage_and_commit(engine, db_url, v2, f"{unique_name}-2", [r for r in window if r.partition == 0])

    with engine.begin() as conn:
        expected = dict(conn.execute(text(f"SELECT _spec_version, count(*) FROM {table} WHERE _spec_version <> 2 "
                                          "GROUP BY 1")).all())  # fmt: skip
        stale, read = _read_by(conn, v2, lambda: stale_rows(conn, v2, 2))
        assert (stale, read) == (expected, 0)
        assert expected == {1: OUTSIDE + (PARTITIONS - 1) * PER_PARTITION}

    ranges = [OffsetRange(unique_name, p, 0, PER_PARTITION) for p in range(PARTITIONS)]
    with engine.begin() as conn:
        cur = pg_cursor(conn)
        found, read = _read_by(conn, v2, lambda: SPEC_VERSIONS.run(Window(conn, cur, v2, sql.SQL("unused"), ranges)))
    stale_partitions = {TopicPartition(unique_name, p) for p in range(1, PARTITIONS)}
    assert {tp for tp, message in found.items() if message} == stale_partitions
    assert all(found[tp].startswith(f"{PER_PARTITION} rows from spec v1; current is v2") for tp in stale_partitions)
    assert read <= PARTITIONS * PER_PARTITION, f"read {read} rows of the target for a window of {len(window)}"

    # Once every row is v2's (the other rows re-derived), the check reads no row at all.
    stage_and_commit(engine, db_url, v2, f"{unique_name}-3", [r for r in window if r.partition])
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {table} SET _spec_version = 2 WHERE _run_id = 'earlier'"))
    with engine.begin() as conn:
        cur = pg_cursor(conn)
        found, read = _read_by(conn, v2, lambda: SPEC_VERSIONS.run(Window(conn, cur, v2, sql.SQL("unused"), ranges)))
    assert (dict(found), read) == ({}, 0)
