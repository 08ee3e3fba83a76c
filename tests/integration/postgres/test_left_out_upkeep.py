"""The bookkeeping of Debezium's left-out values stays indexed and small (review V finding 11).

- The commit's lookup of a stored row's incomplete values (once per stage row it fills) uses the
  index migration 019 left on ``(pipeline, md5(key::text), column)``: EXPLAINed on the real Postgres
  over a pipeline with many incomplete values, no plan scans ``reprocess.incomplete_values``.
- A commit prunes ``reprocess.moved_values``: a kept key change goes once its new key's row was
  rewritten by a record that left nothing out, or deleted, after the change; one whose new key still
  holds the moved value stays, and so does one whose new key was deleted before the change (a re-key
  onto it) while the create is still to come (a cut between the delete and the create).

Records are staged by hand (no Spark) with the product's stage writer, as test_record_limits does.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg2
from psycopg2 import sql
from sqlalchemy import text

from reprocess.core.ranges import OffsetRange
from reprocess.formats.specs import parse_spec
from reprocess.postgres import left_out
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import drop_stage, stage_identifier
from reprocess.runner.start import commit_stored
from tests.support.staging import Record, mark_staged, plan_ranges, stage_and_commit, write_stage

INCOMPLETE_ELSEWHERE = 20_000  # other keys' incomplete values of the same pipeline


def _spec(name: str):
    return parse_spec(
        {"name": name, "topics": [name], "key": ["id"], "format": "debezium", "columns": {"id": "text", "s": "text"},
         "target_table": f"{name}.items"},
        source=f"{name}.yaml",
    )  # fmt: skip


class _Explaining:
    """A cursor that EXPLAINs the UPDATEs it is given instead of running them (they fill nothing)."""

    def __init__(self, cur: Any) -> None:
        self._cur, self.plans, self.rowcount = cur, [], 0

    def execute(self, query: Any, params: Any = None) -> None:
        statement = query.as_string(self._cur) if isinstance(query, sql.Composable) else query
        if statement.lstrip().startswith("UPDATE"):
            self._cur.execute("EXPLAIN " + statement, params)
            self.plans.append("\n".join(r[0] for r in self._cur.fetchall()))
            self.rowcount = 0
        else:
            self._cur.execute(query, params)
            self.rowcount = self._cur.rowcount

    def fetchone(self) -> Any:
        return self._cur.fetchone()


def test_left_out_lookup_of_incomplete_values_uses_the_key_digest_index(engine, db_url, unique_name):
    spec = _spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [Record(0, o, {"id": f"k{o}", "s": "full"})
                                                                for o in range(5)])  # fmt: skip
    with engine.begin() as conn:
        conn.execute(
            text('INSERT INTO reprocess.incomplete_values (pipeline, key, "column", topic, partition, "offset", '
                 "run_id, reason) SELECT :p, jsonb_build_object('id', 'other' || i), 's', :p, 0, i, 'r', 'x' "
                 "FROM generate_series(1, :n) AS i"),
            {"p": spec.name, "n": INCOMPLETE_ELSEWHERE},
        )  # fmt: skip
        conn.execute(text("ANALYZE reprocess.incomplete_values"))
    run_id = f"{unique_name}-2"  # each record leaves s out: its value is looked up in the stored rows
    write_stage(db_url, spec, run_id, [Record(0, 10 + o, {"id": f"k{o}", "_unchanged": "s"}) for o in range(5)])
    pg = psycopg2.connect(libpq_url(db_url))
    try:
        with pg, pg.cursor() as cur:
            explaining = _Explaining(cur)
            left_out.resolve(explaining, spec, stage_identifier(spec, run_id), spec.name, live=None)
            drop_stage(pg, spec, run_id)
    finally:
        pg.close()
    lookups = [p for p in explaining.plans if "incomplete_values" in p]
    print(lookups[0])
    assert lookups, explaining.plans
    assert all("Seq Scan on incomplete_values" not in p for p in lookups), lookups[0]
    assert all("incomplete_values_value" in p for p in lookups), lookups[0]


def _stage_and_commit(engine, db_url, spec, run_id: str, records: list[Record], moved: dict[str, str]) -> None:
    """Stage ``records``, the valued ones keyed in ``moved`` (old key → new key) as the delete of
    that key change carrying the old key's values (staged beside its tombstone), and commit the run."""
    offsets = [r.offset for r in records]
    plan_ranges(engine, spec, run_id, "backfill", [OffsetRange(spec.topics[0], 0, min(offsets), max(offsets) + 1)])
    rows = write_stage(db_url, spec, run_id, records)
    with engine.begin() as conn:
        stage = stage_identifier(spec, run_id).as_string(conn.connection.dbapi_connection)
        for old, new in moved.items():
            conn.execute(
                text(f"UPDATE {stage} SET _kind = 'moved', _records = 0, _row_key = :old, _new_key = :new, "
                     "_moved_at = '1' WHERE id = :id AND s IS NOT NULL"),
                {"old": json.dumps({"id": old}), "new": json.dumps({"id": new}), "id": old},
            )  # fmt: skip
    mark_staged(engine, run_id, rows)
    commit_stored(engine, spec, run_id)


def _created(new: str, old: str, offset: int) -> Record:
    """The create of key ``new`` by a primary-key change from ``old``, its ``s`` left out."""
    links = {"_unchanged": "s", "_row_key": json.dumps({"id": new}), "_old_key": json.dumps({"id": old}),
             "_old_at": "1"}  # fmt: skip
    return Record(0, offset, {"id": new, **links})


def test_a_commit_prunes_the_moved_values_whose_new_key_was_rewritten_or_deleted(engine, db_url, unique_name):
    spec = _spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [Record(0, o, {"id": k, "s": f"{k}-notes"})
                                                                for o, k in enumerate("ABCDM")])  # fmt: skip
    changes = {"A": "J", "B": "K", "C": "L", "D": "M"}  # M is deleted first: D is re-keyed onto it
    _stage_and_commit(
        engine, db_url, spec, f"{unique_name}-2",
        [Record(0, 9, {"id": "M"}, tombstone=True),
         *(Record(0, 10 + i, {"id": old}, tombstone=True) for i, old in enumerate(changes)),
         *(Record(0, 10 + i, {"id": old, "s": f"{old}-notes"}) for i, old in enumerate(changes)),
         *(_created(new, old, 20 + i) for i, (old, new) in enumerate(changes.items()) if new != "M")],
        changes,
    )  # fmt: skip

    def state() -> tuple[dict[str, str], list[str]]:
        with engine.connect() as conn:
            rows = dict(conn.execute(text(f"SELECT id, s FROM {spec.qualified_target}")).all())
            kept = conn.execute(text("SELECT new_key FROM reprocess.moved_values WHERE pipeline = :p ORDER BY 1"),
                                {"p": spec.name}).scalars().all()  # fmt: skip
        return rows, [json.loads(k)["id"] for k in kept]

    assert state() == ({"J": "A-notes", "K": "B-notes", "L": "C-notes"}, ["J", "K", "L", "M"])
    # J is rewritten by a record that sends s, K is deleted, L keeps the value its change moved, and
    # M's create comes in this run (the cut fell between D's delete and it).
    later = [Record(0, 30, {"id": "J", "s": "J-notes"}), Record(0, 31, {"id": "K"}, tombstone=True),
             _created("M", "D", 32)]  # fmt: skip
    stage_and_commit(engine, db_url, spec, f"{unique_name}-3", later)
    assert state() == ({"J": "J-notes", "L": "C-notes", "M": "D-notes"}, ["L", "M"])
