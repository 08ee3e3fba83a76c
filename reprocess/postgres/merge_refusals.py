"""The merge's second layer (DESIGN §4: no record can make a run fail forever): a staged record
whose merge PostgreSQL refuses for a record-level reason becomes a dead letter.

The stage holds the target's column types but none of its indexes or constraints, so a record
can pass the COPY and fail the merge on every attempt: a key over the btree index row limit
(SQLSTATE 54000; the Spark job makes such keys dead letters by their size, but not a key
PostgreSQL's compression had let into an older table, nor a constraint on a key's other
tables), a CHECK, NOT NULL or foreign key the user added to the target (class 23), a value the
target's own type refuses (class 22). So the merge runs under a savepoint; when it fails for
such a reason it is undone, and the stage's rows and tombstones are bisected, each part merged
alone under a savepoint that is always rolled back, until each refused row is alone. That row
becomes a dead letter naming PostgreSQL's reason, and the merge runs again. Any other error is
the infrastructure's and fails the commit, as before.

As at the stage (:mod:`reprocess.postgres.refused`), a refused row is its key's newest record in
the run: the key keeps its stored row, and the dead letter's lineage says which record to redrive.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import psycopg2
from psycopg2 import sql

from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.core.stage_rows import DEAD, ROW, TOMBSTONE
from reprocess.postgres.merge import apply_tombstones_sql, merge_sql
from reprocess.postgres.refused import is_data_error

log = logging.getLogger(__name__)

T = TypeVar("T")
PROGRAM_LIMIT: Final = "54000"  # "index row size … exceeds btree … maximum", "row is too big"
_ERROR_CHARS: Final = 400


def is_record_error(exc: BaseException) -> bool:
    """A refusal of the record itself: a data exception or a constraint (classes 22, 23), or a
    program limit the record's size hits (54000), which a retry would meet again."""
    return is_data_error(exc) or getattr(exc, "pgcode", None) == PROGRAM_LIMIT


def merge_isolating(
    cur: Any, spec: PipelineSpec, stage: sql.Composable, params: Mapping[str, Any], merge: Callable[[], T]
) -> tuple[T, int]:
    """``merge()`` (the commit's step 3 over ``stage`` into ``spec``'s table, binding ``params``),
    with the rows PostgreSQL refuses for a record-level reason made dead letters in the stage first.
    Returns what ``merge`` returns and how many rows were made dead letters."""
    refused = 0
    while True:
        cur.execute("SAVEPOINT reprocess_merge")
        try:
            result = merge()
        except psycopg2.Error as exc:
            if not is_record_error(exc):
                raise
            cur.execute("ROLLBACK TO SAVEPOINT reprocess_merge")
            cur.execute(sql.SQL("SELECT ctid::text FROM {} WHERE _kind IN (%s, %s)").format(stage), (ROW, TOMBSTONE))
            found = _isolate(cur, spec, stage, params, [r[0] for r in cur.fetchall()])
            if not found:  # no single record fails alone: not a record's fault after all
                raise
            for ctid, error in found:
                cur.execute(sql.SQL("UPDATE {} SET _kind = %s, _error = %s WHERE ctid = %s::tid").format(stage),
                            (DEAD, _refusal_text(spec, error), ctid))  # fmt: skip
            log.warning("merge into %s: rows refused by PostgreSQL, made dead letters=%d", spec.qualified_target,
                        len(found))  # fmt: skip
            refused += len(found)
            continue
        cur.execute("RELEASE SAVEPOINT reprocess_merge")
        return result, refused


def _isolate(
    cur: Any, spec: PipelineSpec, stage: sql.Composable, params: Mapping[str, Any], ctids: list[str]
) -> list[tuple[str, psycopg2.Error]]:
    """The stage rows (by ctid) whose merge alone PostgreSQL refuses for a record-level reason."""
    if not ctids:
        return []
    part = sql.SQL("(SELECT * FROM {} WHERE ctid = ANY(%(_probe)s::tid[]))").format(stage)
    cur.execute("SAVEPOINT reprocess_merge_probe")
    try:
        cur.execute(merge_sql(spec, part), {**params, "_probe": ctids})
        if spec.tombstones is TombstoneMode.DELETE:
            cur.execute(apply_tombstones_sql(spec, part), {**params, "_probe": ctids})
    except psycopg2.Error as exc:
        cur.execute("ROLLBACK TO SAVEPOINT reprocess_merge_probe")
        cur.execute("RELEASE SAVEPOINT reprocess_merge_probe")
        if not is_record_error(exc):
            raise
        if len(ctids) == 1:
            return [(ctids[0], exc)]
        half = len(ctids) // 2
        return _isolate(cur, spec, stage, params, ctids[:half]) + _isolate(cur, spec, stage, params, ctids[half:])
    cur.execute("ROLLBACK TO SAVEPOINT reprocess_merge_probe")  # a probe never writes
    cur.execute("RELEASE SAVEPOINT reprocess_merge_probe")
    return []


def _refusal_text(spec: PipelineSpec, exc: psycopg2.Error) -> str:
    """The dead letter's error: PostgreSQL's reason and SQLSTATE, escaped like every error text."""
    reason = json.dumps((exc.diag.message_primary or str(exc)).strip()[:_ERROR_CHARS], ensure_ascii=False)[1:-1]
    return (
        f"merge error: PostgreSQL refused the record's row in {spec.qualified_target}: {reason} (SQLSTATE "
        f"{exc.pgcode}); the stage took it, so the record is a dead letter: redrive it once the target can hold it"
    )
