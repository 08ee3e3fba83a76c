"""The run-scoped stage: an UNLOGGED table that Spark executors fill with COPY.

A stage belongs to one run (its name derives from the run id). The Spark job drops and
re-creates it before writing, so a retried attempt never doubles rows; the commit drops it.
Each Spark task COPYs its rows in one transaction, once per task whatever Spark retries
(:mod:`reprocess.postgres.stage_write`), so a failed task leaves nothing behind.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import psycopg2
from psycopg2 import sql
from sqlalchemy import Engine, text

from reprocess.core.errors import StageLostError
from reprocess.core.names import parent_run_id
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import DEAD, FILTERED, LINKS, MOVED, ROW, TOMBSTONE, UNCHANGED, stage_columns
from reprocess.postgres.stage_write import forget_writes, stage_oid

if TYPE_CHECKING:
    from psycopg2.extensions import connection as PgConnection

log = logging.getLogger(__name__)

STAGE_SCHEMA: Final = "reprocess_stage"


def stage_identifier(spec: PipelineSpec, run_id: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(STAGE_SCHEMA), sql.Identifier(spec.stage_table(run_id)))


def require_stage(cur: Any, spec: PipelineSpec, owner: str, what: str, fix: str) -> sql.Composed:
    """The stage of ``owner`` (``what``: a check, an audit), or a StageLostError saying ``fix``: a
    clean-up may drop a stage between the Spark task that wrote it and the task that reads it."""
    stage = stage_identifier(spec, owner)
    cur.execute("SELECT to_regclass(%s)", (stage.as_string(cur),))
    if cur.fetchone()[0] is None:
        raise StageLostError(f"{spec.name}: the stage of {what} {owner} does not exist; {fix}", pipeline=spec.name,
                             run_id=owner)  # fmt: skip
    return stage


CHECK_COMMENT: Final = "reconciliation check "


def stage_types(spec: PipelineSpec) -> dict[str, str]:
    """Each stage column's PostgreSQL type, in :func:`reprocess.core.stage_rows.stage_columns` order."""
    types = {c.name: c.sql_type for c in spec.columns}
    types.update(
        {
            "_kind": "text",
            "_kafka_topic": "text",
            "_kafka_partition": "integer",
            "_kafka_offset": "bigint",
            "_kafka_timestamp": "timestamptz",
            "_records": "bigint",
            "_error": "text",
            "_raw_key": "text",
            "_raw_value": "text",
            UNCHANGED: "text",
            **dict.fromkeys(LINKS, "text"),
        }
    )
    return {c: types[c] for c in stage_columns(spec)}


def create_stage(conn: PgConnection, spec: PipelineSpec, run_id: str, *, check: bool = False) -> int:
    """(Re)create the run's stage empty: whatever a dead attempt left is dropped first. Returns the
    new table's oid, which the job's tasks write under (a task of an older job finds another oid
    and writes nothing: :func:`reprocess.postgres.stage_write.write_task`).

    A reconciliation check's stage (``check``) has no run row to be found by, so its table's
    comment names the check: :func:`drop_leftover_check_stages` finds it that way.
    """
    table = stage_identifier(spec, run_id)
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in stage_types(spec).items()
    )
    with conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(STAGE_SCHEMA)))
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        forget_writes(cur, spec.stage_table(run_id))
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(table, columns))
        if check:
            cur.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(table, sql.Literal(CHECK_COMMENT + run_id)))
        oid = stage_oid(cur, f"{STAGE_SCHEMA}.{spec.stage_table(run_id)}")
    if oid is None:
        raise StageLostError(
            f"{spec.name}: run {run_id}'s stage is missing right after its creation", pipeline=spec.name, run_id=run_id
        )
    return oid


def drop_stage(conn: Any, spec: PipelineSpec, run_id: str) -> None:
    with conn.cursor() as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage_identifier(spec, run_id)))
        forget_writes(cur, spec.stage_table(run_id))


def stage_counts_sql(stage: sql.Composable) -> sql.Composed:
    """(records read, good rows and tombstones staged, dead letters, records filtered out by the
    spec's ``where``, stage rows holding that count, moved rows: the deletes of primary-key
    changes staged again with their values) from the stage."""
    return sql.SQL(
        "SELECT coalesce(sum(_records), 0), count(*) FILTER (WHERE _kind IN ({row}, {tombstone})), "
        "count(*) FILTER (WHERE _kind = {dead}), coalesce(sum(_records) FILTER (WHERE _kind = {filtered}), 0), "
        "count(*) FILTER (WHERE _kind = {filtered}), count(*) FILTER (WHERE _kind = {moved}) FROM {stage}"
    ).format(
        stage=stage,
        moved=sql.Literal(MOVED),
        row=sql.Literal(ROW),
        tombstone=sql.Literal(TOMBSTONE),
        dead=sql.Literal(DEAD),
        filtered=sql.Literal(FILTERED),
    )


def _attempt_key(run_id: str) -> str:
    """Batches (``<run>#<k>``) are staged by their parent run's attempt, so they share its key."""
    return "reprocess-stage:" + parent_run_id(run_id)


@contextmanager
def live_attempt(db_url: str, run_id: str) -> Iterator[None]:
    """Held by a Spark attempt while it (re)creates and fills a run's stages and marks them staged.

    A session advisory lock on its own connection: it ends with the attempt, even a killed one
    (the server drops the session), so :func:`drop_leftover_stages` never drops a stage under a
    live writer and always can after a dead one.
    """
    conn = psycopg2.connect(db_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(hashtext(%s))", (_attempt_key(run_id),))
        yield
    finally:
        conn.close()


def drop_leftover_stages(engine: Engine, spec: PipelineSpec) -> list[str]:
    """Drop the stages the pipeline's failed and abandoned runs left; returns the run ids.

    A run that is ``failed`` (a failed or fenced commit, a dead-letter ratio over the threshold,
    a Spark job that died) or still ``planned`` (its attempt died before marking it staged) will
    never commit its stage: a retry re-creates it from empty anyway. ``staged`` runs keep theirs
    (their commit task may still come) and committed runs dropped theirs in the commit. A stage
    a live attempt holds (:func:`live_attempt`) is skipped.
    """
    with engine.begin() as conn:
        tables = set(conn.execute(_STAGE_TABLES, {"schema": STAGE_SCHEMA}).scalars())
        if not tables:
            return []
        runs = [r for r in conn.execute(_LEFTOVER_RUNS, {"pipeline": spec.name}).scalars()]
    dropped = []
    for run_id in runs:
        if spec.stage_table(run_id) not in tables:
            continue
        with engine.begin() as conn:
            if not conn.execute(_TRY_ATTEMPT_LOCK, {"key": _attempt_key(run_id)}).scalar():
                continue  # a live attempt is writing it
            if conn.execute(_LEFTOVER_RUNS_ONE, {"run_id": run_id}).scalar() is None:
                continue  # re-staged or committed meanwhile
            drop_stage(conn.connection, spec, run_id)
        dropped.append(run_id)
    if dropped:
        log.info("pipeline=%s dropped the stages of runs no attempt will commit: %s", spec.name, dropped)
    return dropped


def drop_leftover_check_stages(engine: Engine, spec: PipelineSpec) -> list[str]:
    """Drop the stages the pipeline's earlier reconciliation checks left; returns the check ids.

    A check drops its stage when it records its verdicts; one whose Spark task or verdicts
    failed leaves it, and a retry of the DAG run is a new check with a new id. A stage a live
    window job holds (:func:`live_attempt`) is skipped. Called when the pipeline's next check
    is planned (the reconcile DAG runs one check at a time).
    """
    with engine.begin() as conn:
        found = conn.execute(_CHECK_TABLES, {"schema": STAGE_SCHEMA, "prefix": CHECK_COMMENT + "%"}).all()
    dropped = []
    for relname, comment in found:
        check_id = comment.removeprefix(CHECK_COMMENT)
        if spec.stage_table(check_id) != relname:
            continue  # another pipeline's check
        with engine.begin() as conn:
            if not conn.execute(_TRY_ATTEMPT_LOCK, {"key": _attempt_key(check_id)}).scalar():
                continue  # its window job is writing it
            drop_stage(conn.connection, spec, check_id)
        dropped.append(check_id)
    if dropped:
        log.info("pipeline=%s dropped the stages of checks that never recorded verdicts: %s", spec.name, dropped)
    return dropped


_CHECK_TABLES: Final = text(
    "SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :schema AND c.relkind = 'r' AND obj_description(c.oid, 'pg_class') LIKE :prefix"
)
_STAGE_TABLES: Final = text(
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :schema AND c.relkind = 'r'"
)
_LEFTOVER_RUNS: Final = text(
    "SELECT run_id FROM reprocess.runs WHERE pipeline = :pipeline AND state IN ('planned', 'failed')"
)
_LEFTOVER_RUNS_ONE: Final = text(
    "SELECT 1 FROM reprocess.runs WHERE run_id = :run_id AND state IN ('planned', 'failed')"
)
# Transaction-scoped: the cleanup holds it only while it drops, so an attempt starting then waits.
_TRY_ATTEMPT_LOCK: Final = text("SELECT pg_try_advisory_xact_lock(hashtext(:key))")
