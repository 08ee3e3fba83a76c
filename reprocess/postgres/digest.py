"""Row digests: what lets ``reprocess audit --stored`` find a row changed, removed or inserted
outside the product in one scan of the target, reading no Kafka (issue 57 item 3).

Every row of a target carries ``_digest``, a 64-bit digest of its values, and
``reprocess.stored_digests`` keeps per target table how many rows carry one and the sum of their
digests (``sql/026_stored_digests.sql`` says why each is shaped so). The merge writes a row's digest
in its own statement (:func:`digest_sql`); any other row the product writes (a left-out value
filled in, an existing row at the migration) gets it from the table's trigger, which builds the same
text from the catalog (``reprocess.digest_text_sql``); statement triggers keep the count and sum in
the same transaction. All of it only in the product's own transactions (:func:`as_writer`), so a
change by hand keeps the old digest and sum, and the check sees it.

Not a defence against someone who recomputes the digests and sums by hand: it finds the accidents
and the other jobs, like a checksum, not a forger (that would need a key the database cannot read).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from psycopg2 import sql
from sqlalchemy import Connection, text

from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import LINEAGE

# Columns a digest leaves out: the run that last wrote the row and when, which the merge keeps
# apart from the values (merge_sql), and the digest itself.
UNDIGESTED: Final = frozenset({"_run_id", "_updated_at", "_digest"})
# Settings a value's text depends on, pinned wherever a digest is computed (as the triggers' own).
PINNED: Final = (
    ("TimeZone", "UTC"),
    ("DateStyle", "ISO, YMD"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "1"),
    ("bytea_output", "hex"),
)
_AS_WRITER: Final = text("SELECT set_config('reprocess.writer', 'on', true)")


def digested_columns(spec: PipelineSpec) -> list[str]:
    """The columns a row's digest covers, in byte order of their names (as the SQL side orders them)."""
    names = [c.name for c in spec.columns] + [*LINEAGE, "_spec_version"]
    return sorted((n for n in names if n not in UNDIGESTED), key=lambda n: n.encode())


def digest_text(columns: Sequence[str], value_of: dict[str, sql.Composable]) -> sql.Composed:
    """The text a digest is taken of: ``name=`` and each non-NULL value's literal, comma-ended.

    ``value_of`` gives each column's value expression; the mirror of ``reprocess.digest_text_sql``.
    """
    return sql.SQL(" || ").join(
        sql.SQL("coalesce({} || quote_literal({}) || ',', '')").format(sql.Literal(f"{c}="), value_of[c])
        for c in columns
    )


def digest_sql(spec: PipelineSpec, value_of: dict[str, sql.Composable]) -> sql.Composed:
    """The digest (``bigint``) of a row the spec derives, from its columns' value expressions."""
    return sql.SQL("reprocess.row_digest({})").format(digest_text(digested_columns(spec), value_of))


def guard_target_sql(table: sql.Composable) -> sql.Composed:
    """Give ``table`` its digest column, triggers and (once) its rows' digests and sum (idempotent)."""
    return sql.SQL("SELECT reprocess.guard_target(to_regclass({}))").format(table)


def rebase_digests(cur: Any, table: sql.Composable) -> None:
    """Take the count and sum of ``table``'s stored digests as the product's own, in the caller's
    transaction. For a heal: the audit has just proved the table against the log, so a row removed by
    hand and written back since (which the count would report as removed for ever) is settled. Rows
    whose values no longer match their digest are still found: only the count and sum start over."""
    cur.execute(
        sql.SQL(
            'UPDATE reprocess.stored_digests d SET "rows" = x.c, digest_sum = x.t, updated_at = now() FROM '
            "(SELECT count(_digest) AS c, coalesce(sum(_digest), 0) AS t FROM {table}) AS x "
            "WHERE d.relid = to_regclass({name})"
        ).format(table=table, name=sql.Literal(table.as_string(cur)))
    )


def as_writer(conn: Connection) -> None:
    """Mark the transaction as the product's: its writes keep the digests and their sum.

    Local to the transaction (``set_config(..., true)``), so it ends with it."""
    conn.execute(_AS_WRITER)


@contextmanager
def pinned_output(cur: Any) -> Iterator[None]:
    """Run the statements inside with :data:`PINNED` settings, then restore the session's: a value's
    text (its digest) must not depend on the session that writes or checks it. Only around the
    statements that digest, so nothing else in a commit sees the changed settings."""
    cur.execute(sql.SQL("SELECT {}").format(sql.SQL(", ").join(sql.SQL("current_setting({})").format(sql.Literal(n))
                                                             for n, _ in PINNED)))  # fmt: skip
    before = cur.fetchone()
    _set(cur, list(PINNED))
    yield  # on an error the caller's rollback (to its savepoint) undoes the settings with the rest
    _set(cur, [(n, v) for (n, _), v in zip(PINNED, before, strict=True)])


def _set(cur: Any, settings: list[tuple[str, str]]) -> None:
    cur.execute(
        sql.SQL("SELECT {}").format(
            sql.SQL(", ").join(sql.SQL("set_config({}, {}, true)").format(sql.Literal(n), sql.Literal(v))
                               for n, v in settings)
        )
    )  # fmt: skip
