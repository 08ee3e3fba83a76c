"""SQL that writes a pipeline's target from the stage: the idempotent merge, deletes and their
deletion markers, and the split-key check the commit runs before them.

Deletes (spec ``tombstones: delete``, offset ordering only) are ordered events, like rows. A
tombstone that is newer than the key's row deletes the row and leaves a **deletion marker** in
``reprocess_deleted.<pipeline>`` (the key plus the tombstone's lineage). The invariant, per key:
at most one of (target row, marker) exists, and it carries the lineage of the newest record the
pipeline has committed for the key. A replayed older record loses against the marker exactly as
it would against a row, so a replay never resurrects a deleted key; a newer record replaces the
marker with a row.

For reconciliation: a key whose newest valid record in a window is a tombstone is correct when
the target has NO row for it and its marker (:func:`~reprocess.postgres.target.markers_identifier`)
carries that tombstone's (topic, partition, offset), or a newer record's lineage (row or marker).
A marker whose lineage is older than the key's newest record is stale, exactly like a row.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg2 import sql

from reprocess.core.ordering import LINEAGE_ORDER
from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.core.stage_rows import LINEAGE, ROW, TOMBSTONE
from reprocess.postgres.column_sql import comparable
from reprocess.postgres.digest import digest_sql
from reprocess.postgres.target import marker_order, markers_identifier, target_identifier


def merge_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """Stage → target upsert; binds ``run_id`` and ``spec_version``; returns ONE row:
    (rows written, of them inserted, of them re-derived, rows restamped).

    A row is replaced when the incoming record is newer by the pipeline's
    :class:`~reprocess.core.ordering.Ordering`, OR when it is the same record and the derived row
    differs (payload columns or the spec version that derived it, ``IS DISTINCT FROM``): a
    replay after a spec or transform change re-derives exactly the rows that differ, a replay
    with an unchanged spec changes nothing, and an older record never wins. A row the new spec
    version derives to the same values is only restamped with that version (not counted as
    written): its ``_updated_at`` and ``_run_id`` stay, so they keep saying when its values last
    changed, and reconciliation no longer counts it as derived by an older version. Every row it
    writes takes its digest (:mod:`reprocess.postgres.digest`) from the incoming values in this
    statement, so the tamper check finds a later change by hand; the digest leaves out ``_run_id``
    and ``_updated_at``, so a restamp's digest is EXCLUDED's too.

    ``DISTINCT ON (key)`` guards against a stage that holds a key twice (a Spark task that
    committed its COPY and was then re-run): ``ON CONFLICT DO UPDATE`` must not touch a row
    twice in one statement. Both the ``DISTINCT ON`` order and the ``WHERE`` come from the
    pipeline's :class:`~reprocess.core.ordering.Ordering`, so the stage's winner and the target's
    comparison are the same rule. ``RETURNING old.…`` (PostgreSQL 18) tells an insert (no old
    row), a re-derived row (same lineage) and a newer record apart.

    With ``tombstones: delete`` the newest record per key is chosen among rows AND tombstones,
    and a row is written only when it is also newer than the key's deletion marker;
    :func:`apply_tombstones_sql` then handles the keys whose newest record is a tombstone.
    """
    payload = [c.name for c in spec.columns]
    all_cols = [*payload, *LINEAGE]
    values = [c for c in payload if c not in spec.key]
    derived = [*values, "_spec_version"]
    ident = sql.Identifier
    key = sql.SQL(", ").join(map(ident, spec.key))
    cols = sql.SQL(", ").join(map(ident, all_cols))
    if spec.tombstones is TombstoneMode.DELETE:
        source = sql.SQL(
            "SELECT {incoming}, %(run_id)s, %(spec_version)s, {digest} FROM ({newest}) AS _w WHERE _w._kind = {row} "
            "AND NOT EXISTS (SELECT 1 FROM {markers} AS _m WHERE {same_key} AND NOT {newer_than_marker})"
        ).format(
            incoming=sql.SQL(", ").join(sql.SQL("_w.{}").format(ident(c)) for c in all_cols),
            digest=_incoming_digest(spec, sql.Identifier("_w")),
            newest=newest_per_key(spec, stage),
            row=sql.Literal(ROW),
            markers=markers_identifier(spec),
            same_key=_same_key(spec, ident("_m"), ident("_w")),
            newer_than_marker=spec.ordering.newer_sql(ident("_m"), ident("_w")),
        )
    else:
        # The digest outside the DISTINCT ON: computed for each key's winner only, not every staged row.
        source = sql.SQL(
            "SELECT {cols}, %(run_id)s, %(spec_version)s, {digest} FROM (SELECT DISTINCT ON ({key}) {cols} "
            "FROM {stage} WHERE _kind = {row} ORDER BY {key}, {order}) AS _w"
        ).format(key=key, cols=cols, stage=stage, row=sql.Literal(ROW), order=spec.ordering.newest_first_sql(),
                 digest=_incoming_digest(spec, sql.Identifier("_w")))  # fmt: skip
    alias = ident(spec.target_table)
    excluded = sql.SQL("EXCLUDED")
    kinds = {c.name: c.type for c in spec.columns}

    def row_of(table: sql.Composable, columns: list[str]) -> sql.Composed:
        return sql.SQL("ROW({})").format(
            sql.SQL(", ").join(comparable(sql.SQL("{}.{}").format(table, ident(c)), kinds.get(c)) for c in columns)
        )

    return sql.SQL(
        "WITH merged AS (INSERT INTO {target} AS {alias} ({cols}, _run_id, _spec_version, _digest) {source} "
        "ON CONFLICT ({key}) DO UPDATE SET {updates}, _digest = EXCLUDED._digest, "
        "_run_id = CASE WHEN {changed} THEN EXCLUDED._run_id ELSE {alias}._run_id END, "
        "_spec_version = EXCLUDED._spec_version, "
        "_updated_at = CASE WHEN {changed} THEN now() ELSE {alias}._updated_at END "
        "WHERE {newer} OR ({same} AND {old_row} IS DISTINCT FROM {new_row}) "
        "RETURNING old._kafka_offset IS NULL AS inserted, {old_lineage} = {new_lineage} AS same_record, "
        "{old_values} IS NOT DISTINCT FROM {new_values} AS same_values) "
        "SELECT count(*) FILTER (WHERE NOT (same_record AND same_values) OR inserted), "
        "count(*) FILTER (WHERE inserted), "
        "count(*) FILTER (WHERE same_record AND NOT same_values), count(*) FILTER (WHERE same_record AND same_values) "
        "FROM merged"
    ).format(
        target=target_identifier(spec),
        alias=alias,
        cols=cols,
        source=source,
        key=key,
        updates=sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(ident(c), ident(c)) for c in all_cols if c not in spec.key
        ),
        newer=spec.ordering.newer_sql(alias, excluded),
        same=spec.ordering.same_record_sql(alias, excluded),
        changed=sql.SQL("{} OR {} IS DISTINCT FROM {}").format(
            spec.ordering.newer_sql(alias, excluded), row_of(alias, values), row_of(excluded, values)
        ),
        old_values=row_of(sql.SQL("old"), values),
        new_values=row_of(sql.SQL("new"), values),
        old_row=row_of(alias, derived),
        new_row=row_of(excluded, derived),
        old_lineage=row_of(sql.SQL("old"), list(LINEAGE_ORDER)),
        new_lineage=row_of(sql.SQL("new"), list(LINEAGE_ORDER)),
    )


def _incoming_digest(spec: PipelineSpec, alias: sql.Identifier) -> sql.Composed:
    """The digest of the row the merge writes from a staged row (``reprocess.postgres.digest``):
    the stage holds the target's types, and the spec version is the one the merge binds."""
    value_of: dict[str, sql.Composable] = {
        c: sql.SQL("{}.{}").format(alias, sql.Identifier(c)) for c in [*(c.name for c in spec.columns), *LINEAGE]
    }
    value_of["_spec_version"] = sql.SQL("%(spec_version)s::int")
    return digest_sql(spec, value_of)


def newest_per_key(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """The stage's newest record per key among rows and tombstones (by the pipeline's ordering)."""
    return sql.SQL(
        "SELECT DISTINCT ON ({key}) * FROM {stage} WHERE _kind IN ({row}, {tombstone}) ORDER BY {key}, {order}"
    ).format(
        key=sql.SQL(", ").join(map(sql.Identifier, spec.key)),
        stage=stage,
        row=sql.Literal(ROW),
        tombstone=sql.Literal(TOMBSTONE),
        order=spec.ordering.newest_first_sql(),
    )


def underived_sql(spec: PipelineSpec, stage: sql.Composable, ranges: Sequence[OffsetRange]) -> sql.Composed:
    """The condition on target rows (alias ``_x``) that another spec version derived from a record
    the stage read (their lineage lies in ``ranges``) and that the stage's spec no longer keeps: the
    stage holds no row or tombstone of the key that is that record or newer, so the record is now
    filtered by ``where``, a dead letter (a column made required, a transform's ``_error``) or
    dropped by a transform. Binds ``spec_version``.

    A re-derivation deletes such rows before the merge, which then writes the key's newest record
    the spec keeps in the range, if any: no row stays derived by a spec that is not live (the
    day's check would flag it for ever), and the key holds what the spec derives from the records
    read. A row of the live version is never touched here (its record was kept when it was written).
    """
    ident = sql.Identifier
    read = sql.SQL(" OR ").join(
        sql.SQL("(_x._kafka_topic = {} AND _x._kafka_partition = {} AND _x._kafka_offset >= {} "
                "AND _x._kafka_offset < {})").format(*map(sql.Literal, (r.topic, r.partition, r.start, r.end)))
        for r in ranges
    )  # fmt: skip
    return sql.SQL(
        "_x._spec_version IS DISTINCT FROM %(spec_version)s AND ({read}) AND NOT EXISTS (SELECT 1 FROM {stage} AS _s "
        "WHERE _s._kind IN ({row}, {tombstone}) AND {same_key} AND ({same} OR {newer}))"
    ).format(
        read=read,
        stage=stage,
        row=sql.Literal(ROW),
        tombstone=sql.Literal(TOMBSTONE),
        same_key=_same_key(spec, ident("_s"), ident("_x")),
        same=spec.ordering.same_record_sql(ident("_x"), ident("_s")),
        newer=spec.ordering.newer_sql(ident("_x"), ident("_s")),
    )


def delete_underived_sql(spec: PipelineSpec, stage: sql.Composable, ranges: Sequence[OffsetRange]) -> sql.Composed:
    """Delete the rows of :func:`underived_sql` (binds ``spec_version``; the cursor's rowcount says how many)."""
    return sql.SQL("DELETE FROM {} AS _x WHERE {}").format(target_identifier(spec), underived_sql(spec, stage, ranges))


def _same_key(spec: PipelineSpec, a: sql.Identifier, b: sql.Identifier) -> sql.Composed:
    return sql.SQL(" AND ").join(
        sql.SQL("{}.{} = {}.{}").format(a, sql.Identifier(k), b, sql.Identifier(k)) for k in spec.key
    )


def apply_tombstones_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """Keys whose newest staged record is a tombstone newer than their row: delete the row and
    record (or advance) the deletion marker. Binds ``run_id``; returns (rows deleted, markers written).

    Runs after :func:`merge_sql` in the same transaction (the two touch disjoint keys: a key's
    newest staged record is either a row or a tombstone).
    """
    ident = sql.Identifier
    carried = [*marker_order(spec), *LINEAGE]
    lineage = sql.SQL(", ").join(map(ident, carried))
    return sql.SQL(
        "WITH _t AS (SELECT * FROM ({newest}) AS _w WHERE _w._kind = {tombstone} AND NOT EXISTS "
        "(SELECT 1 FROM {target} AS _x WHERE {same_key_x} AND NOT {newer_than_row})), "
        "_gone AS (DELETE FROM {target} AS _x USING _t WHERE {same_key_xt} RETURNING 1), "
        "_marked AS (INSERT INTO {markers} AS _m ({key}, {lineage}, _run_id) "
        "SELECT {key}, {lineage}, %(run_id)s FROM _t ON CONFLICT ({key}) DO UPDATE SET {updates}, "
        "_run_id = EXCLUDED._run_id, _updated_at = now() WHERE {newer_than_marker} RETURNING 1) "
        "SELECT (SELECT count(*) FROM _gone), (SELECT count(*) FROM _marked)"
    ).format(
        newest=newest_per_key(spec, stage),
        tombstone=sql.Literal(TOMBSTONE),
        target=target_identifier(spec),
        same_key_x=_same_key(spec, ident("_x"), ident("_w")),
        newer_than_row=spec.ordering.newer_sql(ident("_x"), ident("_w")),
        same_key_xt=_same_key(spec, ident("_x"), ident("_t")),
        markers=markers_identifier(spec),
        key=sql.SQL(", ").join(map(ident, spec.key)),
        lineage=lineage,
        updates=sql.SQL(", ").join(sql.SQL("{} = EXCLUDED.{}").format(ident(c), ident(c)) for c in carried),
        newer_than_marker=spec.ordering.newer_sql(ident("_m"), sql.SQL("EXCLUDED")),
    )


def drop_superseded_markers_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """Markers of keys that got a row in this commit: :func:`merge_sql` wrote the row only because
    it was newer than the marker, so the marker is history (keeps "row XOR marker" per key)."""
    ident = sql.Identifier
    return sql.SQL(
        "DELETE FROM {markers} AS _m USING {stage} AS _s WHERE _s._kind = {row} AND {same_key_ms} "
        "AND EXISTS (SELECT 1 FROM {target} AS _x WHERE {same_key_xm})"
    ).format(
        markers=markers_identifier(spec),
        stage=stage,
        row=sql.Literal(ROW),
        same_key_ms=_same_key(spec, ident("_m"), ident("_s")),
        target=target_identifier(spec),
        same_key_xm=_same_key(spec, ident("_x"), ident("_m")),
    )


def split_keys_sql(spec: PipelineSpec, stage: sql.Composable, examples: int) -> sql.Composed:
    """Keys whose staged records, row or deletion marker sit on more than one (topic, partition):
    (key text, the partitions), at most ``examples`` per check. Under offset ordering such
    records have no order (the Spark job keeps the newest per key AND partition, so they reach the
    stage). One grouping of the stage and one join per stored table.

    Both run over every staged key, since a stage that passes has no split key to stop at: the
    grouping compares raw columns and formats only its examples, and each join is computed whole
    (``MATERIALIZED``), because under a bare ``LIMIT`` the planner probes the target's index once
    per staged key (docs/performance.md measures both on a 1 M-key stage)."""
    ident = sql.Identifier
    key = sql.SQL(", ").join(map(ident, spec.key))
    staged = sql.SQL("SELECT {key}, _kafka_topic, _kafka_partition FROM {stage} WHERE _kind IN ({row}, {tomb})").format(
        key=key, stage=stage, row=sql.Literal(ROW), tomb=sql.Literal(TOMBSTONE)
    )

    def where(alias: str) -> sql.Composed:
        return sql.SQL("{a}._kafka_topic || '[' || {a}._kafka_partition || ']'").format(a=ident(alias))

    def key_text(alias: str) -> sql.Composed:
        return sql.SQL("concat_ws('|', {})").format(
            sql.SQL(", ").join(sql.SQL("{}.{}::text").format(ident(alias), ident(k)) for k in spec.key)
        )

    within = sql.SQL(
        "(SELECT {key_text}, string_agg(DISTINCT {where}, ', ') FROM ({staged}) AS _s WHERE ({key}) IN "
        "(SELECT {key} FROM ({staged}) AS _g GROUP BY {key} HAVING min(_kafka_topic) <> max(_kafka_topic) "
        "OR min(_kafka_partition) <> max(_kafka_partition) LIMIT {n}) GROUP BY {key})"
    ).format(key_text=key_text("_s"), where=where("_s"), staged=staged, key=key, n=sql.Literal(examples))
    current = [target_identifier(spec)]
    if spec.tombstones is TombstoneMode.DELETE:
        current.append(markers_identifier(spec))
    stored = [
        sql.SQL(
            "(WITH _j AS MATERIALIZED (SELECT {key_text}, {old} || ', ' || {new} FROM ({staged}) AS _s "
            "JOIN {table} AS _x ON {same} WHERE (_x._kafka_topic, _x._kafka_partition) <> "
            "(_s._kafka_topic, _s._kafka_partition)) SELECT * FROM _j LIMIT {n})"
        ).format(
            key_text=key_text("_s"),
            old=where("_x"),
            new=where("_s"),
            staged=staged,
            table=table,
            same=_same_key(spec, ident("_x"), ident("_s")),
            n=sql.Literal(examples),
        )
        for table in current
    ]
    return sql.SQL("{} LIMIT {}").format(sql.SQL(" UNION ALL ").join([within, *stored]), sql.Literal(examples))
