"""Keep a pipeline's target table and its spec version in step, and say which rows an older spec derived.

Each distinct spec fingerprint is a version (v1, v2, ...) in ``reprocess.spec_versions``. Registering
a new version and altering the table happen in ONE transaction: a nullable column is added in
place (a backfill then fills it); a change that cannot be applied in place (a type change, a new
key, a dropped column) raises :class:`SchemaChangeError` before anything is read, naming what
changed and offering the rebuild, never a Postgres error in the middle of a commit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from psycopg2 import sql
from sqlalchemy import Connection, text

from reprocess.core.column_types import format_type
from reprocess.core.errors import SchemaChangeError
from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.core.spec import ColumnSpec, PipelineSpec
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.target import LINEAGE_COLUMNS, create_target_sql, not_null, target_identifier

log = logging.getLogger(__name__)

_REGISTER_VERSION: Final = text(
    "INSERT INTO reprocess.spec_versions (pipeline, version, fingerprint, spec) "
    "SELECT :pipeline, coalesce(max(version), 0) + 1, :fingerprint, CAST(:spec AS jsonb) "
    "FROM reprocess.spec_versions WHERE pipeline = :pipeline ON CONFLICT (pipeline, fingerprint) DO NOTHING"
)
_VERSION_OF: Final = text(
    "SELECT version FROM reprocess.spec_versions WHERE pipeline = :pipeline AND fingerprint = :fingerprint"
)
_LIVE_VERSION: Final = text("SELECT spec_version FROM reprocess.pipelines WHERE name = :pipeline")
_SET_LIVE_VERSION: Final = text("UPDATE reprocess.pipelines SET spec_version = :version WHERE name = :pipeline")
_LIVE_COLUMNS: Final = text(
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
    "WHERE a.attrelid = to_regclass(:table) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)
_NOT_NULL: Final = text(
    "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = to_regclass(:table) AND a.attnum > 0 "
    "AND NOT a.attisdropped AND a.attnotnull"
)
_LIVE_KEY: Final = text(
    "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
    "WHERE i.indrelid = to_regclass(:table) AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)"
)


@dataclass(frozen=True, slots=True)
class SchemaDiff:
    added: tuple[ColumnSpec, ...]  # nullable payload columns the table lacks: ALTER TABLE … ADD COLUMN
    changes: tuple[str, ...]  # what cannot be applied in place

    @property
    def in_place(self) -> bool:
        return not self.changes


def diff_schema(spec: PipelineSpec, columns: dict[str, str], key: tuple[str, ...]) -> SchemaDiff:
    """Compare the spec with a table's payload columns (name → ``format_type``) and primary key.

    Examples
    --------
    >>> from reprocess.formats.specs import parse_spec
    >>> spec = parse_spec({"name": "p", "topics": ["t"], "key": ["id"],
    ...     "columns": {"id": "bigint", "note": "text", "at": "timestamptz"}})
    >>> diff = diff_schema(spec, {"id": "bigint", "at": "timestamp with time zone", "_run_id": "text"}, ("id",))
    >>> [c.name for c in diff.added], diff.changes
    (['note'], ())
    >>> diff_schema(spec, {"id": "text", "at": "timestamp with time zone", "old": "int"}, ("id",)).changes
    ('column id: type text → bigint', 'column old: dropped from the spec')
    """
    added, changes = [], []
    for c in spec.columns:
        want = format_type(c.type, c.numeric)
        if c.name not in columns:
            if c.name in spec.key:
                changes.append(f"column {c.name}: new key column")
            else:
                added.append(c)
        elif columns[c.name] != want:
            changes.append(f"column {c.name}: type {columns[c.name]} → {want}")
    names = {c.name for c in spec.columns}
    changes += [f"column {n}: dropped from the spec" for n in columns if n not in names and n not in LINEAGE_COLUMNS]
    if tuple(key) != spec.key:
        changes.append(f"key ({', '.join(key)}) → ({', '.join(spec.key)})")
    return SchemaDiff(tuple(added), tuple(changes))


def table_diff(conn: Connection, spec: PipelineSpec) -> SchemaDiff | None:
    """The live target table against the spec; None when the table does not exist yet."""
    with pg_cursor(conn) as cur:
        name = target_identifier(spec).as_string(cur)
    columns = {n: t for n, t in conn.execute(_LIVE_COLUMNS, {"table": name})}
    if not columns:
        return None
    return diff_schema(spec, columns, tuple(conn.execute(_LIVE_KEY, {"table": name}).scalars()))


def register_version(conn: Connection, spec: PipelineSpec) -> int:
    """The spec's version number, registering it as the next one when its fingerprint is new."""
    params = {"pipeline": spec.name, "fingerprint": spec.fingerprint, "spec": json.dumps(spec.as_dict())}
    conn.execute(_REGISTER_VERSION, params)
    return int(conn.execute(_VERSION_OF, params).scalar_one())


def live_version(conn: Connection, spec: PipelineSpec) -> int | None:
    """The spec version the live target table is at (None before versions were recorded)."""
    return conn.execute(_LIVE_VERSION, {"pipeline": spec.name}).scalar()


def migrate_target(conn: Connection, spec: PipelineSpec) -> int:
    """Create or alter the live target for the spec and make its version current; returns it.

    Runs in the caller's transaction, under the pipeline's advisory lock.

    Raises
    ------
    SchemaChangeError
        The table cannot take the spec in place; nothing was changed.
    """
    version = register_version(conn, spec)
    table = target_identifier(spec)
    diff = table_diff(conn, spec)
    with pg_cursor(conn) as cur:
        name = table.as_string(cur)
        if diff is None:
            cur.execute(create_target_sql(spec))
        else:
            if not diff.in_place:
                raise SchemaChangeError(
                    f"{spec.name}: spec {spec.source_file} (v{version}) cannot be applied to {spec.qualified_target} "
                    f"(at v{live_version(conn, spec)}) in place: {'; '.join(diff.changes)}. Nothing was changed "
                    f"and nothing was read. Rebuild the table from the log: trigger {spec.dag_id('backfill')} with "
                    "mode=rebuild (Safety section); the live table is served until the rebuilt one is swapped in.",
                    pipeline=spec.name,
                )
            for c in diff.added:
                add = sql.SQL("ALTER TABLE {} ADD COLUMN {} {}")
                cur.execute(add.format(table, sql.Identifier(c.name), sql.SQL(c.sql_type)))
                log.info("schema pipeline=%s table=%s added column %s %s (v%d)", spec.name, name, c.name, c.sql_type,
                         version)  # fmt: skip
            _constrain_ordering(conn, spec, table, version)
            # Tables created before spec versions were recorded gain the lineage column. Asked first: an
            # ALTER TABLE locks the table even when it changes nothing, and a plan's diff would hold that lock.
            if "_spec_version" not in set(conn.execute(_LIVE_COLUMNS, {"table": name}).scalars()):
                cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN _spec_version int").format(table))
    conn.execute(_SET_LIVE_VERSION, {"pipeline": spec.name, "version": version})
    return version


def _constrain_ordering(conn: Connection, spec: PipelineSpec, table: sql.Composed, version: int) -> None:
    """Make the ordering column NOT NULL (and release a column that no longer orders), refusing a
    table whose rows lack the ordering value.

    A row whose ordering column is NULL can never be replaced (the merge's row comparison is
    unknown) and reconciliation could not call it stale: switching the ordering to a column that
    was just added, or that was once optional, would freeze every such row. Only a rebuild can
    give them a value, from their records.
    """
    with pg_cursor(conn) as cur:
        name = table.as_string(cur)
    constrained = set(conn.execute(_NOT_NULL, {"table": name}).scalars())
    payload = [c.name for c in spec.columns if c.name not in spec.key]
    with pg_cursor(conn) as cur:
        for column in payload:
            want = not_null(spec, column)
            if want == (column in constrained):
                continue
            if want:
                cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE {} IS NULL").format(table, sql.Identifier(column)))
                nulls = int(cur.fetchone()[0])  # type: ignore[index]
                if nulls:
                    raise SchemaChangeError(
                        f"{spec.name}: spec {spec.source_file} (v{version}) orders by {column}, but {nulls:,} rows of "
                        f"{spec.qualified_target} have no {column} (NULL): a newer record could never replace them "
                        f"and reconciliation could not tell. Nothing was changed and nothing was read. Rebuild the "
                        f"table from the log: trigger {spec.dag_id('backfill')} with mode=rebuild (Safety section); "
                        "the live table is served until the rebuilt one is swapped in.",
                        pipeline=spec.name,
                    )
            cur.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} {} NOT NULL").format(
                    table, sql.Identifier(column), sql.SQL("SET" if want else "DROP")
                )
            )


# The target's rows per spec version, as the commit keeps them (sql/027): no scan of the target.
_VERSION_ROWS: Final = text(
    'SELECT spec_version, "rows" FROM reprocess.version_rows WHERE relid = to_regclass(:table) '
    'AND spec_version IS DISTINCT FROM :version AND "rows" > 0'
)


def stale_rows(conn: Connection, spec: PipelineSpec, version: int) -> dict[int | None, int]:
    """Rows of the target derived by another spec version than ``version``: version → rows.

    Read from the counts the commit keeps in the transaction that writes the rows
    (``reprocess.version_rows``), so every run's report costs the same whatever the table holds."""
    with pg_cursor(conn) as cur:
        table = target_identifier(spec).as_string(cur)
    return {v: int(n) for v, n in conn.execute(_VERSION_ROWS, {"table": table, "version": version})}


def stale_in_ranges(conn: Connection, spec: PipelineSpec, ranges: Sequence[OffsetRange]) -> dict[TopicPartition, str]:
    """Reconciliation's check: per partition of a window, its rows derived by an older spec ("" if none).

    One pass for the whole window whatever its partition count: nothing at all while the kept counts
    (:func:`stale_rows`) say every row is the live version's, else one statement over the lineage
    index (``target.lineage_index_sql``) that reads the rows of the window's ranges only."""
    version = live_version(conn, spec)
    if version is None or not ranges or not stale_rows(conn, spec, version):
        return {}
    # LATERAL: each range is its own index range scan (a join may hash the whole table instead).
    query = sql.SQL(
        "SELECT r.topic, r.partition, t._spec_version, t.n FROM unnest(%(topics)s::text[], %(partitions)s::int[], "
        "%(starts)s::bigint[], %(ends)s::bigint[]) AS r(topic, partition, start, stop), LATERAL "
        "(SELECT _spec_version, count(*) AS n FROM {target} WHERE _kafka_topic = r.topic "
        "AND _kafka_partition = r.partition AND _kafka_offset >= r.start AND _kafka_offset < r.stop "
        "AND _spec_version IS DISTINCT FROM %(version)s GROUP BY 1) AS t"
    ).format(target=target_identifier(spec))
    params = {"topics": [r.topic for r in ranges], "partitions": [r.partition for r in ranges],
              "starts": [r.start for r in ranges], "ends": [r.end for r in ranges], "version": version}  # fmt: skip
    found: dict[TopicPartition, dict[int | None, int]] = {}
    with pg_cursor(conn) as cur:
        cur.execute(query, params)
        for topic, partition, v, n in cur.fetchall():
            found.setdefault(TopicPartition(topic, partition), {})[v] = int(n)
    return {tp: stale_message(stale, version, spec.dag_id("backfill")) for tp, stale in found.items()}


def stale_message(stale: dict[int | None, int], version: int, backfill_dag: str | None = None) -> str:
    """What a user reads: which rows an older spec derived and what to do. ``backfill_dag``: the
    window's check names the command that ends it, a backfill of the window, which re-derives the
    rows and deletes those whose record the current spec no longer keeps (merge.underived_sql).

    Examples
    --------
    >>> stale_message({3: 12345, None: 2}, 4)
    '12,345 rows from spec v3, 2 rows from before spec versions; current is v4: run a backfill to re-derive'
    >>> stale_message({3: 2}, 4, "orders_backfill")  # doctest: +NORMALIZE_WHITESPACE
    '2 rows from spec v3; current is v4: run a backfill to re-derive: trigger orders_backfill over this window (its
    heal conf); rows whose record spec v4 no longer keeps (filtered by where, a dead letter) are deleted'
    >>> stale_message({}, 4)
    ''
    """
    if not stale:
        return ""
    parts = [
        f"{n:,} rows from " + (f"spec v{v}" if v is not None else "before spec versions")
        for v, n in sorted(stale.items(), key=lambda x: (x[0] is None, x[0] or 0))
    ]
    message = f"{', '.join(parts)}; current is v{version}: run a backfill to re-derive"
    if backfill_dag is None:
        return message
    return (
        f"{message}: trigger {backfill_dag} over this window (its heal conf); rows whose record spec v{version} "
        "no longer keeps (filtered by where, a dead letter) are deleted"
    )
