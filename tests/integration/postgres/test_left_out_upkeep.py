"""The bookkeeping of Debezium's left-out values stays indexed and small (review V finding 11).

- Every statement of a commit's left-out part finds incomplete values by migration 019's index on
  ``(pipeline, md5(key::text), column)`` and kept key changes by an index (their keys' digests,
  migration 028; the run's own by run id): EXPLAINed on the real Postgres over a pipeline with many
  of both, no plan scans ``reprocess.incomplete_values`` or ``reprocess.moved_values``.
- A commit prunes ``reprocess.moved_values``: a kept key change goes once its new key's row was
  rewritten by a record that left nothing out, or deleted, after the change; one whose new key still
  holds the moved value stays, and so does one whose new key was deleted before the change (a re-key
  onto it) while the create is still to come (a cut between the delete and the create).

Records are staged by hand (no Spark) with the product's stage writer, as test_record_limits does.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import psycopg2
from psycopg2 import sql
from sqlalchemy import text

from reprocess.core.ranges import OffsetRange
from reprocess.formats.specs import parse_spec
from reprocess.postgres import left_out
from reprocess.postgres.db import libpq_url
from reprocess.postgres.moved_values import prune_moved_values
from reprocess.postgres.stage import drop_stage, stage_identifier
from reprocess.runner.start import commit_stored
from tests.support.staging import Record, mark_staged, plan_ranges, stage_and_commit, write_stage

ELSEWHERE = 20_000  # other keys' incomplete values, and kept key changes, of the same pipeline


def _spec(name: str):
    return parse_spec(
        {"name": name, "topics": [name], "key": ["id"], "format": "debezium", "columns": {"id": "text", "s": "text"},
         "target_table": f"{name}.items"},
        source=f"{name}.yaml",
    )  # fmt: skip


class _Explaining:
    """A cursor that EXPLAINs each statement reading the left-out bookkeeping before it runs it."""

    def __init__(self, cur: Any) -> None:
        self._cur, self.plans, self.rowcount = cur, [], 0

    def execute(self, query: Any, params: Any = None) -> None:
        statement = query.as_string(self._cur) if isinstance(query, sql.Composable) else query
        if "moved_values" in statement or "incomplete_values" in statement:
            self._cur.execute("EXPLAIN " + statement, params)
            self.plans.append("\n".join(r[0] for r in self._cur.fetchall()))
        self._cur.execute(query, params)
        self.rowcount = self._cur.rowcount

    def fetchone(self) -> Any:
        return self._cur.fetchone()


def _unbounded(plan: str) -> list[str]:
    """The plan's reads of the bookkeeping tables that do not look up a key's (or a run's) entries
    by index: a sequential scan, or an index scan bounded by the pipeline alone (but for the partial
    index of the kept changes still without digests)."""
    lines, found = plan.splitlines(), []
    for i, line in enumerate(lines):
        if "Scan" in line and (" on incomplete_values" in line or " on moved_values" in line):
            node = [line, *itertools.takewhile(lambda x: "->" not in x, lines[i + 1 :])]
            cond = next((x for x in node if "Index Cond" in x or "Recheck Cond" in x), "")
            partial = "moved_values_undigested" in line  # the rows without digests (none once given them)
            if not partial and not any(bound in cond for bound in ("md5(", "_digest", "run_id")):
                found.append(" ".join(x.strip() for x in node[:2]))
    return found


def test_a_commits_left_out_statements_find_incomplete_and_moved_values_by_index(engine, db_url, unique_name):
    """Every statement of a commit's left-out part (resolve, keep the moved values, record the
    incomplete ones and fill the linked ones, prune), over a pipeline holding many incomplete and
    moved values of other keys: an update that leaves ``s`` out, and a key change k1 → k9."""
    spec = _spec(unique_name)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [Record(0, o, {"id": f"k{o}", "s": "full"})
                                                                for o in range(5)])  # fmt: skip
    with engine.begin() as conn:
        conn.execute(
            text('INSERT INTO reprocess.incomplete_values (pipeline, key, "column", topic, partition, "offset", '
                 "run_id, reason) SELECT :p, jsonb_build_object('id', 'other' || i), 's', :p, 0, i, 'r', 'x' "
                 "FROM generate_series(1, :n) AS i"),
            {"p": spec.name, "n": ELSEWHERE},
        )  # fmt: skip
        keep_moved = (  # kept changes of other keys, as a commit keeps them (keep_moved_values)
            'INSERT INTO reprocess.moved_values (pipeline, old_key, new_key, moved_at, topic, partition, "offset", '
            '"values", run_id, old_digest, new_digest) SELECT :p, _o::text, _n::text, i::text, :p, 0, i, '
            "jsonb_build_object('s', 'v'), 'r', md5(_o::text), md5(_n::text) FROM generate_series(1, :n) AS i, "
            "jsonb_build_object('id', 'old' || i) AS _o, jsonb_build_object('id', 'new' || i) AS _n"
        )
        conn.execute(text(keep_moved), {"p": spec.name, "n": ELSEWHERE})
        conn.execute(text("ANALYZE reprocess.incomplete_values"))
        conn.execute(text("ANALYZE reprocess.moved_values"))
    run_id = f"{unique_name}-2"
    records = [Record(0, 10, {"id": "k0", "_unchanged": "s", "_row_key": json.dumps({"id": "k0"})}),
               Record(0, 11, {"id": "k1"}, tombstone=True), Record(0, 11, {"id": "k1", "s": "full"}),
               _created("k9", "k1", 12)]  # fmt: skip
    _stage_moved(engine, db_url, spec, run_id, records, {"k1": "k9"})
    pg = psycopg2.connect(libpq_url(db_url))
    try:
        with pg.cursor() as cur:
            explaining, stage = _Explaining(cur), stage_identifier(spec, run_id)
            left_out.resolve(explaining, spec, stage, spec.name, live=None)
            left_out.keep_moved_values(explaining, spec, stage, spec.name, run_id)
            left_out.record_incomplete(explaining, spec, stage, spec.name, run_id)
            prune_moved_values(explaining, spec, stage, spec.name)
        pg.rollback()
        drop_stage(pg, spec, run_id)
        pg.commit()
    finally:
        pg.close()
    scans = [scan for plan in explaining.plans for scan in _unbounded(plan)]
    assert len(explaining.plans) >= 10, explaining.plans
    assert not scans, f"{len(scans)} unbounded reads in {len(explaining.plans)} plans: {scans}"


def _stage_moved(engine, db_url, spec, run_id: str, records: list[Record], moved: dict[str, str]) -> int:
    """Plan a run and stage ``records``, the valued ones keyed in ``moved`` (old key → new key) as
    the delete of that key change carrying the old key's values (staged beside its tombstone)."""
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
    return rows


def _stage_and_commit(engine, db_url, spec, run_id: str, records: list[Record], moved: dict[str, str]) -> None:
    """:func:`_stage_moved`, then commit the run."""
    mark_staged(engine, run_id, _stage_moved(engine, db_url, spec, run_id, records, moved))
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
    with engine.begin() as conn:  # as kept before sql/028: the next commit gives them their key digests
        conn.execute(text("UPDATE reprocess.moved_values SET old_digest = NULL, new_digest = NULL WHERE pipeline = :p"),
                     {"p": spec.name})  # fmt: skip
    # J is rewritten by a record that sends s, K is deleted, L keeps the value its change moved, and
    # M's create comes in this run (the cut fell between D's delete and it).
    later = [Record(0, 30, {"id": "J", "s": "J-notes"}), Record(0, 31, {"id": "K"}, tombstone=True),
             _created("M", "D", 32)]  # fmt: skip
    stage_and_commit(engine, db_url, spec, f"{unique_name}-3", later)
    assert state() == ({"J": "J-notes", "L": "C-notes", "M": "D-notes"}, ["L", "M"])
