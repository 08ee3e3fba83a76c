"""A rebuild's own state and its commit: the shadow prepared, and swapped in with the ledger.

A backfill with ``mode=rebuild`` is how a change that cannot be applied in place (a type
change, a new key, a dropped column) reaches the target. The live pipeline's state stays
untouched and served throughout. Its stages (:mod:`reprocess.core.stages`):

1. planning registers the spec's version without migrating the live table; the
   ``PrepareShadow`` stage (:func:`prepare_shadow`) creates the empty shadow state (a
   :class:`~reprocess.core.stages.WriteTarget`): ``<table>__rebuild`` with the new schema, its own
   deletion markers ``reprocess_deleted.<pipeline>__rebuild`` (the new key's columns), its own dead
   letters (``pipeline = '<pipeline>/rebuild'``) and the keys its batches stage
   (:mod:`reprocess.postgres.rebuild_keys`);
2. its batches (``Read`` then ``Merge`` into the shadow, in the Spark task) each go through the
   commit protocol (:mod:`reprocess.postgres.commit`) and commit on their own, advancing neither the
   ledger nor the committed ranges, nor resolving any live dead letter, so a killed rebuild resumes
   after its last committed batch and an abandoned one leaves the live pipeline as it was;
3. its ``Verify`` stage checks the shadow (reconciliation's key check of the newest record per key
   the batches' Spark job staged: :mod:`reprocess.operations.rebuild_verify`);
4. its ``Swap`` stage (:func:`swap_in`) is the commit protocol's third kind of commit: in ONE
   transaction under the pipeline's lock it checks every batch committed, refuses if the live table
   has rows the log no longer holds (their keys' records are older than the log start;
   ``allow_data_loss`` drops them, recorded as lost ranges of the run) or objects the swap cannot
   carry over (views, foreign keys, triggers, policies: :mod:`reprocess.postgres.attached`); carries
   over grants, indexes and publication membership; renames the live table and markers to
   ``…__old_<UTC time>`` (kept until the user drops them) and the shadow's to the live names; then
   writes the bookkeeping through the same functions as a commit: dead letters
   (:func:`~reprocess.postgres.dead_letters.adopt_dead_letters`), incomplete and moved values, the
   ledger and committed ranges (:func:`~reprocess.postgres.ledger.point_ledger_at`), the live spec
   version and the run's state (:mod:`reprocess.postgres.store`). A rebuild with nothing to read
   goes through the same swap; no rebuild is ever marked committed without it.

Runs planned against the old table are fenced at their commit: the spec version they were
planned under is no longer the live table's (``commit.check_spec_version``), or the ledger
moved under their compare-and-set.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Final

from psycopg2 import sql
from sqlalchemy import Connection, Engine, Row, text

from reprocess.core.errors import ReprocessError, RunStateError
from reprocess.core.names import kept_table
from reprocess.core.runs import LostRange, RunMode, RunRanges
from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.core.stages import WriteTarget
from reprocess.postgres import attached, store
from reprocess.postgres.batch_commit import sum_committed_batches
from reprocess.postgres.commit import CommitResult, commit_protocol
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.dead_letters import adopt_dead_letters, forget_dead_letters
from reprocess.postgres.ledger import point_ledger_at
from reprocess.postgres.moved_values import adopt_left_out, forget_left_out
from reprocess.postgres.rebuild_keys import create_rebuild_keys_sql, drop_rebuild_keys_sql
from reprocess.postgres.target import (
    MARKERS_SCHEMA,
    create_markers_sql,
    create_target_sql,
    markers_identifier,
    target_identifier,
)

log = logging.getLogger(__name__)

_PRIMARY_KEY_NAME: Final = text(
    "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(:table) AND contype = 'p'"
)


def prepare_shadow(conn: Connection, spec: PipelineSpec, run_id: str) -> None:
    """Mark the run a rebuild and start its shadow state empty: table, deletion markers (with the
    new key's columns), dead letters and the keys its batches stage; whatever an abandoned rebuild
    left goes. Once per run: a retried planning task leaves the shadow of a run it already prepared
    (its batches stand)."""
    if store.run_mode(conn, run_id) is RunMode.REBUILD:  # the mark this stage leaves
        log.info("rebuild run_id=%s pipeline=%s shadow already prepared", run_id, spec.name)
        return
    into = WriteTarget.shadow(spec)
    shadow = into.spec(spec)
    store.mark_rebuild(conn, run_id)
    forget_dead_letters(conn, into.dead_letters_owner)
    forget_left_out(conn, into.dead_letters_owner)
    with pg_cursor(conn) as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target_identifier(shadow)))
        cur.execute(create_target_sql(shadow, lineage_index=False))  # the swap carries the live one's over
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(markers_identifier(shadow)))
        if spec.tombstones is TombstoneMode.DELETE:
            cur.execute(create_markers_sql(shadow))
        cur.execute(create_rebuild_keys_sql(shadow))
    log.info("rebuild run_id=%s pipeline=%s shadow=%s created", run_id, spec.name, shadow.qualified_target)


def swap_in(engine: Engine, spec: PipelineSpec, run_id: str) -> CommitResult:
    """Swap rebuild ``run_id``'s shadow in with the ledger, through the commit protocol
    (:func:`~reprocess.postgres.commit.commit_protocol`: one transaction, under the pipeline's and
    the run's locks; a swapped run answers "already committed"). Its ``Verify`` stage came first.

    Raises
    ------
    ReprocessError
        A batch is not committed, the live table has rows the log no longer holds, or objects
        hang off it that the swap cannot carry over; the message names them and the remedy.
        Nothing was swapped.
    CommitInterrupted
        The connection dropped during the swap's commit; retrying is safe.
    """
    stamp = f"{datetime.now(UTC):%Y%m%d%H%M%S}"

    def swap(conn: Connection, run: Row[Any]) -> CommitResult:
        totals = _swap(conn, spec, run_id, stamp)
        log.info("rebuild run_id=%s pipeline=%s swapped in, previous table kept as %s.%s %s", run_id, spec.name,
                 spec.target_schema, kept_table(spec.target_table, stamp), totals)  # fmt: skip
        return CommitResult(run_id, False, **totals)

    return commit_protocol(engine, spec, run_id, swap)


def _swap(conn: Connection, spec: PipelineSpec, run_id: str, stamp: str) -> dict[str, int]:
    """The swap in the protocol's transaction; returns the run's counts (its batches' sum)."""
    into = WriteTarget.shadow(spec)
    shadow = into.spec(spec)
    run_ranges = store.load_ranges(conn, run_id)
    totals = sum_committed_batches(conn, run_id)
    if totals is None:
        if not run_ranges.is_empty:
            raise RunStateError(
                f"{spec.name}: rebuild {run_id} has no committed batches; run the Spark stage",
                pipeline=spec.name,
                run_id=run_id,
            )
        totals = dict.fromkeys(store.RUN_COUNTS, 0)
        store.mark_committed(conn, run_id, totals)
    if _exists(conn, target_identifier(spec)):  # a pipeline's first run may be its rebuild
        _check_rows_beyond_the_log(conn, spec, run_ranges)
        _carry_over(conn, spec, stamp)
        _rename(conn, spec.target_schema, spec.target_table, kept_table(spec.target_table, stamp))
    _rename(conn, shadow.target_schema, shadow.target_table, spec.target_table)
    if _exists(conn, markers_identifier(spec)):
        _rename(conn, MARKERS_SCHEMA, spec.markers_table or spec.name, kept_table(spec.name, stamp))
    if _exists(conn, markers_identifier(shadow)):
        _rename(conn, MARKERS_SCHEMA, into.markers, spec.markers_table or spec.name)
    adopt_dead_letters(conn, spec.name, into.dead_letters_owner, run_id)
    adopt_left_out(conn, spec.name, into.dead_letters_owner)
    with pg_cursor(conn) as cur:
        cur.execute(drop_rebuild_keys_sql(spec))
    point_ledger_at(conn, spec.name, run_id, run_ranges.ranges)
    store.make_spec_live(conn, spec, run_id)
    store.touch_target(conn, run_id)  # plans made before the swap describe another table
    return totals


def _carry_over(conn: Connection, spec: PipelineSpec, stamp: str) -> None:
    """Grants, indexes and publications move to the shadow; anything else hanging off the live
    table refuses the swap, by name (see :mod:`reprocess.postgres.attached`)."""
    with pg_cursor(conn) as cur:
        live = target_identifier(spec).as_string(cur)
    blocked = attached.blockers(conn, live)
    blocked += attached.carry_over(conn, spec, WriteTarget.shadow(spec).spec(spec), stamp)
    if blocked:
        raise ReprocessError(
            f"{spec.name}: the swap would leave these on the old table, bound to it, not to its name: "
            f"{'; '.join(blocked)}. Nothing was swapped. Drop them (or make them fit the new columns), run the "
            f"commit task again, then re-create them on the new {spec.qualified_target}.",
            pipeline=spec.name,
        )


def _check_rows_beyond_the_log(conn: Connection, spec: PipelineSpec, run_ranges: RunRanges) -> None:
    """Refuse to drop live rows whose key the rebuild could not see: their newest record is older
    than the rebuilt range's start (retention deleted it) or on a partition it did not read.

    With ``allow_data_loss`` they are dropped and recorded as lost ranges of the run (per
    partition: from the oldest such row's offset to the rebuilt start).
    """
    beyond = _rows_beyond_the_log(conn, spec, run_ranges)
    if not beyond:
        return
    total = sum(n for _, _, n, _, _ in beyond)
    detail = "; ".join(
        f"{t}[{p}]: {n} rows from offset {low}"
        + (f" below the log start {start}" if start is not None else " (not read)")
        for t, p, n, low, start in beyond
    )
    if not store.allows_data_loss(conn, run_ranges.run_id):
        raise ReprocessError(
            f"{spec.name}: the swap would drop {total} rows of {spec.qualified_target} whose records the log no "
            f"longer holds ({detail}): the rebuild read from the log start and could not re-derive them. Nothing "
            "was swapped. Keep the live table (revert the spec), or rebuild again with allow_data_loss=true to "
            "drop them (they are recorded as lost ranges of the run).",
            pipeline=spec.name,
            run_id=run_ranges.run_id,
        )
    lost = [LostRange(t, p, low, start) for t, p, _, low, start in beyond if start is not None]
    store.add_lost_ranges(conn, run_ranges.run_id, lost)
    log.warning("rebuild run_id=%s pipeline=%s drops %d rows the log no longer holds (allow_data_loss): %s",
                run_ranges.run_id, spec.name, total, detail)  # fmt: skip


def _rows_beyond_the_log(
    conn: Connection, spec: PipelineSpec, run_ranges: RunRanges
) -> list[tuple[str, int, int, int, int | None]]:
    """Per (topic, partition): live rows (and their lowest offset) with no state in the shadow
    whose record lies below the rebuilt start (or whose partition it did not read).

    Keys match on the key columns both tables have, the live value cast to the new type (a
    value that does not cast matches nothing); with no shared key column every such row counts.
    """
    shadow = WriteTarget.shadow(spec).spec(spec)
    live_columns = set(
        conn.execute(
            text("SELECT column_name FROM information_schema.columns WHERE table_schema = :s AND table_name = :t"),
            {"s": spec.target_schema, "t": spec.target_table},
        ).scalars()
    )
    shared = [c for c in spec.key_columns if c.name in live_columns]

    def match(alias: str) -> sql.Composable:
        if not shared:
            return sql.SQL("FALSE")
        return sql.SQL(" AND ").join(
            sql.SQL("{a}.{c} = CASE WHEN pg_input_is_valid(l.{c}::text, {t}) THEN CAST(l.{c}::text AS {type}) END")
            .format(a=sql.Identifier(alias), c=sql.Identifier(c.name), t=sql.Literal(c.sql_type),
                    type=sql.SQL(c.sql_type))
            for c in shared
        )  # fmt: skip

    markers = (
        sql.SQL(" AND NOT EXISTS (SELECT 1 FROM {} m WHERE {})").format(markers_identifier(shadow), match("m"))
        if _exists(conn, markers_identifier(shadow))
        else sql.SQL("")
    )
    query = sql.SQL(
        "SELECT l._kafka_topic, l._kafka_partition, count(*), min(l._kafka_offset), min(r.start) FROM {live} l "
        "LEFT JOIN (SELECT unnest(%(topics)s::text[]) AS topic, unnest(%(partitions)s::int[]) AS partition, "
        "unnest(%(starts)s::bigint[]) AS start) r ON r.topic = l._kafka_topic AND r.partition = l._kafka_partition "
        "WHERE (r.start IS NULL OR l._kafka_offset < r.start) "
        "AND NOT EXISTS (SELECT 1 FROM {shadow} s WHERE {match_s}){markers} GROUP BY 1, 2 ORDER BY 1, 2"
    ).format(live=target_identifier(spec), shadow=target_identifier(shadow), match_s=match("s"), markers=markers)
    ranges = run_ranges.ranges
    params = {"topics": [r.topic for r in ranges], "partitions": [r.partition for r in ranges],
              "starts": [r.start for r in ranges]}  # fmt: skip
    with pg_cursor(conn) as cur:
        cur.execute(query, params)
        return [(t, int(p), int(n), int(low), None if start is None else int(start)) for t, p, n, low, start in cur]


def _exists(conn: Connection, table: sql.Composed) -> bool:
    with pg_cursor(conn) as cur:
        cur.execute("SELECT to_regclass(%s)", (table.as_string(cur),))
        row = cur.fetchone()
    return row is not None and row[0] is not None


def _rename(conn: Connection, schema: str, table: str, new: str) -> None:
    """Rename a table and its primary key, so the next shadow can take the freed constraint name."""
    current = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
    with pg_cursor(conn) as cur:
        name = current.as_string(cur)
    pkey = conn.execute(_PRIMARY_KEY_NAME, {"table": name}).scalar()
    with pg_cursor(conn) as cur:
        if pkey is not None:
            cur.execute(
                sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                    current, sql.Identifier(pkey), sql.Identifier(f"{new[:58]}_pkey")
                )
            )
        cur.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(current, sql.Identifier(new)))
