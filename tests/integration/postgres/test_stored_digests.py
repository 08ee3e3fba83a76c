"""The tamper check (``reprocess audit --stored``, issue 57 item 3) over rows the real commit protocol
wrote: every write path keeps it ok, and a change, a removal and an insertion by hand are each found.

The hand-made changes come through a plain libpq connection with a session unlike the product's
(another time zone and date style), as a person's psql would; expectations are written out here.
"""

from __future__ import annotations

from decimal import Decimal

import psycopg2
from sqlalchemy import create_engine, text

from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import parse_spec
from reprocess.operations.tamper import check_stored
from reprocess.postgres.db import libpq_url, pg_cursor, sqlalchemy_url
from reprocess.postgres.digest import rebase_digests
from reprocess.postgres.target import target_identifier
from tests.support.staging import T0, Record, stage_and_commit

_OTHER_SESSION = "-c TimeZone=Asia/Kathmandu -c DateStyle=SQL,DMY -c extra_float_digits=0"


def _spec(name: str) -> PipelineSpec:
    return parse_spec(
        {"name": name, "topics": [name], "key": ["id"], "tombstones": "delete", "target_table": f"{name}.items",
         "columns": {"id": "text", "s": "text", "at": "timestamptz", "x": "double precision", "n": "numeric"}},
        source=f"{name}.yaml",
    )  # fmt: skip


def _put(offset: int, key: str, s: str) -> Record:
    return Record(0, offset, {"id": key, "s": s, "at": T0, "x": 0.1 * offset, "n": Decimal("1.50")})


def _by_hand(db_url: str, statement: str) -> None:
    with psycopg2.connect(libpq_url(db_url), options=_OTHER_SESSION) as conn, conn.cursor() as cur:
        cur.execute(statement)
    conn.close()


def _checked(db_url: str, spec: PipelineSpec) -> tuple[int, int, int, bool, list[str], list[str]]:
    """The check from a session unlike the writer's: its verdict must not depend on it."""
    other = create_engine(sqlalchemy_url(db_url), connect_args={"options": _OTHER_SESSION})
    try:
        c = check_stored(other, spec)
    finally:
        other.dispose()
    return c.changed, c.removed, c.inserted, c.sum_differs, c.changed_keys, c.inserted_keys


def test_merge_tombstones_and_replay_keep_it_ok_and_an_update_delete_insert_by_hand_are_each_found(
    engine, db_url, unique_name
):
    spec = _spec(unique_name)
    stage_and_commit(
        engine, db_url, spec, f"{unique_name}-1", [_put(0, "a", "a0"), _put(1, "b", "b1"), _put(2, "c", "c2")]
    )
    stage_and_commit(engine, db_url, spec, f"{unique_name}-2",
                     [_put(3, "a", "a3"), Record(0, 4, {"id": "b"}, tombstone=True), _put(5, "d", "d5")])  # fmt: skip
    replay = stage_and_commit(engine, db_url, spec, f"{unique_name}-3", [_put(3, "a", "a3"), _put(5, "d", "d5")])
    assert replay.rows_upserted == 0
    assert _checked(db_url, spec) == (0, 0, 0, False, [], [])

    _by_hand(db_url, f"UPDATE {spec.qualified_target} SET s = 'edited' WHERE id = 'c'")
    assert _checked(db_url, spec) == (1, 0, 0, False, ["c"], [])
    _by_hand(db_url, f"DELETE FROM {spec.qualified_target} WHERE id = 'd'")
    assert _checked(db_url, spec) == (1, 1, 0, False, ["c"], [])
    _by_hand(db_url, f"INSERT INTO {spec.qualified_target} (id, s, _kafka_topic, _kafka_partition, _kafka_offset, "
                     "_run_id) VALUES ('e', 'forged', 'x', 0, 99, 'by-hand')")  # fmt: skip
    assert _checked(db_url, spec) == (1, 1, 1, False, ["c"], ["e"])


def test_a_row_copied_over_a_removed_one_is_found_by_the_sum(engine, db_url, unique_name):
    spec = _spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [_put(0, "a", "a0"), _put(1, "b", "b1")])
    # Remove b, then insert a copy of a under another key, digest and all: the count still matches.
    _by_hand(db_url, f"DELETE FROM {spec.qualified_target} WHERE id = 'b'")
    _by_hand(db_url, f"INSERT INTO {spec.qualified_target} SELECT 'z', s, at, x, n, _kafka_topic, _kafka_partition, "
                     f"_kafka_offset, _kafka_timestamp, _run_id, _updated_at, _spec_version, _digest "
                     f"FROM {spec.qualified_target} WHERE id = 'a'")  # fmt: skip
    changed, removed, inserted, sum_differs, changed_keys, _ = _checked(db_url, spec)
    assert (changed, removed, inserted, sum_differs, changed_keys) == (1, 0, 0, True, ["z"])


def test_a_target_written_before_the_digests_gets_them_at_the_migration(engine, db_url, unique_name):
    spec = _spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [_put(0, "a", "a0"), _put(1, "b", "b1")])
    with engine.begin() as conn:  # the table as it was before sql/026
        conn.execute(text(f"ALTER TABLE {spec.qualified_target} DROP COLUMN _digest CASCADE"))
        conn.execute(text("DELETE FROM reprocess.stored_digests WHERE relid = to_regclass(:t)"),
                     {"t": spec.qualified_target})  # fmt: skip
    with engine.begin() as conn:  # what the migration runs for each existing target
        conn.execute(text("SELECT reprocess.guard_target(to_regclass(:t))"), {"t": spec.qualified_target})
    assert _checked(db_url, spec) == (0, 0, 0, False, [], [])
    stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [_put(2, "a", "a2"), _put(3, "c", "c3")])
    assert _checked(db_url, spec) == (0, 0, 0, False, [], [])


def test_a_row_removed_by_hand_and_written_back_stays_removed_until_a_heal_rebases_the_count(
    engine, db_url, unique_name
):
    spec = _spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [_put(0, "a", "a0"), _put(1, "b", "b1")])
    _by_hand(db_url, f"DELETE FROM {spec.qualified_target} WHERE id = 'b'")
    assert _checked(db_url, spec)[:3] == (0, 1, 0)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [_put(1, "b", "b1")])  # the replay writes it back
    assert _checked(db_url, spec)[:3] == (0, 1, 0)  # the count still says one was removed: proved by no one yet
    with engine.begin() as conn, pg_cursor(conn) as cur:  # what an audit's heal does once the table is proved
        rebase_digests(cur, target_identifier(spec))
    assert _checked(db_url, spec) == (0, 0, 0, False, [], [])


def test_a_spec_that_adds_a_column_and_a_replay_that_re_derives_keep_it_ok(engine, db_url, unique_name):
    spec = _spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [_put(0, "a", "a0"), _put(1, "b", "b1")])
    wider = parse_spec(
        {"name": unique_name, "topics": [unique_name], "key": ["id"], "tombstones": "delete",
         "target_table": f"{unique_name}.items",
         "columns": {"id": "text", "s": "text", "at": "timestamptz", "x": "double precision", "n": "numeric",
                     "extra": "text"}},
        source=f"{unique_name}.yaml",
    )  # fmt: skip
    # The new version adds the column (NULL in both rows, b's digest unchanged); the replay of a's record
    # re-derives a with the column's value.
    again = stage_and_commit(
        engine, db_url, wider, f"{unique_name}-2", [Record(0, 0, {**_put(0, "a", "a0").values, "extra": "e"})]
    )
    assert again.rows_rederived == 1
    assert _checked(db_url, wider) == (0, 0, 0, False, [], [])
