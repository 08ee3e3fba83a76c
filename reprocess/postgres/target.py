"""A pipeline's target table and its deletion markers: their names and their idempotent DDL.

Identifiers come from the spec and go through ``psycopg2.sql.Identifier``. The SQL that writes
them from the stage is in :mod:`reprocess.postgres.merge`; the dead letters' in
:mod:`reprocess.postgres.dead_letters`.
"""

from __future__ import annotations

from typing import Final

from psycopg2 import sql

from reprocess.core.names import shadow_table
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import LINEAGE
from reprocess.postgres.digest import guard_target_sql

_LINEAGE_DDL = (
    "_kafka_topic text NOT NULL, _kafka_partition int NOT NULL, _kafka_offset bigint NOT NULL, "
    "_kafka_timestamp timestamptz, _run_id text NOT NULL, _updated_at timestamptz NOT NULL DEFAULT now(), "
    "_spec_version int"
)
# Every column the pipeline itself maintains (never a spec column); ``_digest``: reprocess.postgres.digest.
LINEAGE_COLUMNS: Final = frozenset({*LINEAGE, "_run_id", "_updated_at", "_spec_version", "_digest"})


def shadow_spec(spec: PipelineSpec) -> PipelineSpec:
    """The same spec writing to ``<table>__rebuild`` and its own deletion markers
    ``reprocess_deleted.<pipeline>__rebuild`` (valid identifiers: at most 63 bytes), so a rebuild
    writes no state of the live pipeline before its swap."""
    import dataclasses

    return dataclasses.replace(
        spec, target_table=shadow_table(spec.target_table), markers_table=shadow_table(spec.name)
    )


def target_identifier(spec: PipelineSpec) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(spec.target_schema), sql.Identifier(spec.target_table))


MARKERS_SCHEMA: Final = "reprocess_deleted"


def markers_identifier(spec: PipelineSpec) -> sql.Composed:
    """The pipeline's deletion markers (``tombstones: delete``): key + the tombstone's lineage."""
    return sql.SQL("{}.{}").format(sql.Identifier(MARKERS_SCHEMA), sql.Identifier(spec.markers_table or spec.name))


def marker_order(spec: PipelineSpec) -> list[str]:
    """The ordering column a marker carries besides the key: only a pipeline whose deletes carry
    a version (Debezium's source position) orders deletes by a column (core/spec.py)."""
    column = spec.ordering.column
    return [column] if column is not None and column not in spec.key else []


def create_markers_sql(spec: PipelineSpec) -> sql.Composed:
    """Idempotent DDL of the deletion markers: the key's columns (and the ordering column, when
    deletes are ordered by one) and the lineage columns."""
    by_name = {c.name: c for c in spec.columns}
    return sql.SQL(
        "CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE IF NOT EXISTS {markers} ({key_columns}, {lineage}, "
        "PRIMARY KEY ({key}))"
    ).format(
        schema=sql.Identifier(MARKERS_SCHEMA),
        markers=markers_identifier(spec),
        key_columns=sql.SQL(", ").join(
            sql.SQL("{} {} NOT NULL").format(sql.Identifier(c.name), sql.SQL(c.sql_type))
            for c in [*spec.key_columns, *(by_name[n] for n in marker_order(spec))]
        ),
        lineage=sql.SQL(_LINEAGE_DDL),
        key=sql.SQL(", ").join(map(sql.Identifier, spec.key)),
    )


def not_null(spec: PipelineSpec, column: str) -> bool:
    """Key columns and the ordering column are NOT NULL in the target: a NULL ordering value would
    make the merge's row comparison unknown, so no newer record could ever replace the row."""
    return column in spec.key or column == spec.ordering.column


def lineage_index_sql(spec: PipelineSpec) -> sql.Composed:
    """Idempotent DDL of the index on the target's lineage: what a window's spec-version check and a
    replay's re-derivation look rows up by (``reprocess.postgres.evolve.stale_in_ranges``,
    ``merge.underived_sql``), so they read the rows of the ranges, not the table. Named after the table
    (``sql/027`` names the existing targets' alike), at most 63 bytes."""
    return sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (_kafka_topic, _kafka_partition, _kafka_offset)").format(
        sql.Identifier(f"{spec.target_table[:55]}_lineage"), target_identifier(spec)
    )


def create_target_sql(spec: PipelineSpec, *, lineage_index: bool = True) -> sql.Composed:
    """Idempotent DDL: natural key as primary key, payload columns and lineage columns, then the
    row digests of the tamper check (:func:`~reprocess.postgres.digest.guard_target_sql`), the rows
    per spec version (``reprocess.version_rows``, ``sql/027``) and the lineage index
    (:func:`lineage_index_sql`; a rebuild's shadow goes without: the swap carries the live table's
    over, built once over the whole shadow, ``postgres.attached.carry_over``)."""
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}{}").format(
            sql.Identifier(c.name), sql.SQL(c.sql_type), sql.SQL(" NOT NULL" if not_null(spec, c.name) else "")
        )
        for c in spec.columns
    )
    name = sql.SQL("quote_ident({}) || '.' || quote_ident({})").format(
        sql.Literal(spec.target_schema), sql.Literal(spec.target_table)
    )
    return sql.SQL(
        "CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE IF NOT EXISTS {table} ({columns}, {lineage}, "
        "PRIMARY KEY ({key})); {guard}; SELECT reprocess.count_versions(to_regclass({name})){index}"
    ).format(
        schema=sql.Identifier(spec.target_schema),
        table=target_identifier(spec),
        columns=columns,
        lineage=sql.SQL(_LINEAGE_DDL),
        key=sql.SQL(", ").join(map(sql.Identifier, spec.key)),
        guard=guard_target_sql(name),
        name=name,
        index=sql.SQL("; {}").format(lineage_index_sql(spec)) if lineage_index else sql.SQL(""),
    )
