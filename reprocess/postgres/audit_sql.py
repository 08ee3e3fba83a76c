"""The whole-table audit's SQL (issue 57): the stage of the whole retained log (the newest record per key,
staged by the window check's own Spark job) against every row of the target, in PostgreSQL, so only counts
and a few examples ever reach the driver.

One statement classifies each key that is not right into a temporary table (:func:`classify_sql`), read
for the counts and examples (:func:`found_counts_sql`, :func:`found_examples_sql`) and by the heal
(:func:`heal_sql`), all in the audit's one transaction. Values compare under the reconciliation's rules
(:func:`reprocess.postgres.compare.differs`); a column the newest record left out and the whole log could
not resolve is not compared, and the row is *unprovable* unless another column differs.
"""

from __future__ import annotations

from typing import Final

from psycopg2 import sql

from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import LINEAGE, ROW, TOMBSTONE, UNCHANGED
from reprocess.postgres.compare import differs, value_columns
from reprocess.postgres.merge import newest_per_key
from reprocess.postgres.target import target_identifier

FOUND: Final = sql.Identifier("_audit_found")  # the transaction's temporary table of keys not right
DIFFER: Final = "differ"  # a row that holds other values than its key's newest record derives
MISSING: Final = "missing"  # a key whose newest record is a row, with no target row
MUST_NOT_BE: Final = "must not be"  # a target row whose key's newest record is a tombstone, or no record at all
UNPROVABLE: Final = "unprovable"  # the log no longer holds what would prove the row (retention, compaction)
KINDS: Final = (DIFFER, MISSING, MUST_NOT_BE, UNPROVABLE)
HEALED: Final = (DIFFER, MISSING, MUST_NOT_BE)  # the kinds a heal rewrites or deletes


def _same_key(spec: PipelineSpec, a: str, b: str) -> sql.Composed:
    return sql.SQL(" AND ").join(
        sql.SQL("{}.{} = {}.{}").format(sql.Identifier(a), sql.Identifier(k), sql.Identifier(b), sql.Identifier(k))
        for k in spec.key
    )


def classify_sql(spec: PipelineSpec, stage: sql.Composable, rows: sql.Composable | None = None) -> sql.Composed:
    """Create :data:`FOUND` (dropped at commit): one row per key that is not right, with its kind, the
    differing columns and the target row's lineage. Binds ``topics``, ``partitions``, ``starts`` and
    ``ends`` (the audited range per partition: log start to the ledger) and ``compacted`` (topics whose
    cleanup policy compacts). A target row whose record lay below its partition's log start is *unprovable*
    unless a retained record of its key is newer (under column ordering the lost record may have been the
    newest); so is a row of a compacted topic whose record is not its key's newest retained one: compaction
    keeps a key's last record, which under column ordering may be older than the one the row came from (a
    late retry), and takes every record of a key written again past the ledger. A row no retained record
    produced is otherwise *must not be*. A row whose lineage lies at or past the audited end was written after
    the snapshot and is not judged. ``rows``: the condition on the target rows (alias ``t``) compared, when the
    stage holds only some key ranges (the checksum bisection's, :mod:`reprocess.postgres.checksum_sql`)."""
    ident = sql.Identifier
    values = value_columns(spec)
    k0 = ident(spec.key[0])
    flags = [differs(spec, c, "s", "t", left_out=True) for c in values]
    columns = (
        sql.SQL("array_remove(ARRAY[{}]::text[], NULL)").format(
            sql.SQL(", ").join(
                sql.SQL("CASE WHEN {} THEN {} END").format(f, sql.Literal(c))
                for f, c in zip(flags, values, strict=True)
            )
        )
        if values
        else sql.SQL("ARRAY[]::text[]")
    )
    audited = sql.SQL(
        "unnest(%(topics)s::text[], %(partitions)s::int[], %(starts)s::bigint[], %(ends)s::bigint[]) "
        "AS a(topic, partition, start_offset, end_offset)"
    )
    left_out = (
        sql.SQL("WHEN s.{u} IS NOT NULL THEN {unprovable} ").format(
            u=ident(UNCHANGED), unprovable=sql.Literal(UNPROVABLE)
        )
        if spec.unchanged_columns
        else sql.SQL("")
    )
    return sql.SQL(
        "CREATE TEMPORARY TABLE {found} ON COMMIT DROP AS "
        "SELECT * FROM (SELECT {keys}, {key_text} AS _key, CASE "
        "WHEN t.{k0} IS NULL THEN CASE WHEN s._kind = {row} THEN {missing} END "
        "WHEN EXISTS (SELECT 1 FROM {audited} WHERE a.topic = t._kafka_topic AND a.partition = t._kafka_partition "
        "AND t._kafka_offset >= a.end_offset) THEN NULL "
        "WHEN (EXISTS (SELECT 1 FROM {audited} WHERE a.topic = t._kafka_topic AND a.partition = t._kafka_partition "
        "AND t._kafka_offset < a.start_offset) OR t._kafka_topic = ANY(%(compacted)s::text[]) AND (s._kind IS NULL "
        "OR NOT {same_record})) AND (s._kind IS NULL OR NOT {s_newer}) THEN {unprovable} "
        "WHEN s._kind IS NULL THEN {must_not_be} "
        "WHEN s._kind = {tombstone} THEN {must_not_be} "
        "WHEN {any} THEN {differ} {left_out}END AS _finding, {columns} AS _columns, "
        "t._kafka_topic AS _topic, t._kafka_partition AS _partition, t._kafka_offset AS _offset "
        "FROM ({newest}) AS s FULL JOIN {target} AS t ON {same}) AS j WHERE _finding IS NOT NULL"
    ).format(
        found=FOUND,
        keys=sql.SQL(", ").join(sql.SQL("coalesce(t.{k}, s.{k}) AS {k}").format(k=ident(k)) for k in spec.key),
        key_text=sql.SQL("concat_ws('|', {})").format(
            sql.SQL(", ").join(sql.SQL("coalesce(t.{k}, s.{k})::text").format(k=ident(k)) for k in spec.key)
        ),
        k0=k0,
        row=sql.Literal(ROW),
        tombstone=sql.Literal(TOMBSTONE),
        missing=sql.Literal(MISSING),
        audited=audited,
        unprovable=sql.Literal(UNPROVABLE),
        must_not_be=sql.Literal(MUST_NOT_BE),
        any=sql.SQL(" OR ").join(flags) if flags else sql.SQL("FALSE"),
        differ=sql.Literal(DIFFER),
        left_out=left_out,
        columns=columns,
        newest=newest_per_key(spec, stage),
        target=target_identifier(spec)
        if rows is None
        else sql.SQL("(SELECT * FROM {} AS t WHERE {})").format(target_identifier(spec), rows),
        same=_same_key(spec, "s", "t"),
        s_newer=spec.ordering.newer_sql(ident("t"), ident("s")),
        same_record=spec.ordering.same_record_sql(ident("t"), ident("s")),
    )


def found_counts_sql() -> sql.Composed:
    """(kind, keys) per kind of :data:`FOUND`."""
    return sql.SQL("SELECT _finding, count(*) FROM {} GROUP BY 1").format(FOUND)


def newest_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """The stage's newest record per key as a relation (``compare.differing_rows_sql``'s stage)."""
    return sql.SQL("({})").format(newest_per_key(spec, stage))


def found_examples_sql(limit: int) -> sql.Composed:
    """Up to ``limit`` keys per kind, by key text: (kind, key, columns, topic, partition, offset), the
    last three the target row's lineage (NULL for a missing key)."""
    return sql.SQL(
        "SELECT _finding, _key, _columns, _topic, _partition, _offset FROM (SELECT *, row_number() OVER "
        "(PARTITION BY _finding ORDER BY _key) AS _n FROM {found}) AS f WHERE _n <= {limit} ORDER BY _finding, _key"
    ).format(found=FOUND, limit=sql.Literal(limit))


def heal_sql(spec: PipelineSpec, stage: sql.Composable) -> list[sql.Composed]:
    """The heal's statements, in order, over :data:`FOUND`; bind ``run_id`` and ``spec_version``:
    delete the rows that must not be; rewrite the differing rows from their key's newest record (a value
    that record left out and the log could not resolve keeps the stored one); insert the missing rows.
    Unprovable rows are not touched. Each returns the rows it wrote."""
    ident = sql.Identifier
    cols = [c.name for c in spec.columns]
    target = target_identifier(spec)
    newest = newest_per_key(spec, stage)
    found = sql.SQL("{found} AS f").format(found=FOUND)

    def kept(c: str) -> sql.Composable:
        if c not in spec.unchanged_columns:
            return sql.SQL("s.{}").format(ident(c))
        return sql.SQL("CASE WHEN {c} = ANY(string_to_array(s.{u}, ',')) THEN t.{col} ELSE s.{col} END").format(
            c=sql.Literal(c), u=ident(UNCHANGED), col=ident(c)
        )

    delete = sql.SQL("DELETE FROM {target} AS t USING {found} WHERE {same} AND f._finding = {kind}").format(
        target=target, found=found, same=_same_key(spec, "t", "f"), kind=sql.Literal(MUST_NOT_BE)
    )
    update = sql.SQL(
        "UPDATE {target} AS t SET {sets}, _run_id = %(run_id)s, _spec_version = %(spec_version)s, "
        "_updated_at = now() FROM ({newest}) AS s, {found} WHERE {same_s} AND {same_f} AND f._finding = {kind}"
    ).format(
        target=target,
        sets=sql.SQL(", ").join(
            sql.SQL("{} = {}").format(ident(c), kept(c)) for c in [*cols, *LINEAGE] if c not in spec.key
        ),
        newest=newest,
        found=found,
        same_s=_same_key(spec, "t", "s"),
        same_f=_same_key(spec, "t", "f"),
        kind=sql.Literal(DIFFER),
    )
    insert = sql.SQL(
        "INSERT INTO {target} ({cols}, _run_id, _spec_version) SELECT {values}, %(run_id)s, %(spec_version)s "
        "FROM ({newest}) AS s JOIN {found} ON {same} WHERE f._finding = {kind} AND s._kind = {row}"
    ).format(
        target=target,
        cols=sql.SQL(", ").join(map(ident, [*cols, *LINEAGE])),
        values=sql.SQL(", ").join(sql.SQL("s.{}").format(ident(c)) for c in [*cols, *LINEAGE]),
        newest=newest,
        found=found,
        same=_same_key(spec, "s", "f"),
        kind=sql.Literal(MISSING),
        row=sql.Literal(ROW),
    )
    return [delete, update, insert]
