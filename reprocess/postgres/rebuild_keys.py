"""The newest record per key that a rebuild's batches staged, kept until its swap verifies the shadow.

A rebuild's swap checks its shadow against what the rebuild's own Spark job derived, as
reconciliation checks a target against its window job's stage: one decoder, one ``where``, one
``transform`` and the same ``expr`` columns decided both the records checked and the records
merged (:mod:`reprocess.operations.rebuild_verify`). A batch's commit drops its stage, so it keeps
here, in its own transaction, what the key check reads of the stage's newest record per key: the
key, the ordering fields, the lineage and the kind (row or tombstone; dead letters and filtered
records are not kept). The table is logged (it outlives the stages, and a PostgreSQL restart
empties unlogged ones), lives in the stage schema as ``<pipeline>__rebuild``, is created empty with
the shadow and dropped by the swap.
"""

from __future__ import annotations

from psycopg2 import sql

from reprocess.core.names import shadow_table
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import LINEAGE
from reprocess.postgres.merge import newest_per_key
from reprocess.postgres.stage import STAGE_SCHEMA, stage_types


def rebuild_keys_identifier(spec: PipelineSpec) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(STAGE_SCHEMA), sql.Identifier(shadow_table(spec.name)))


def _columns(spec: PipelineSpec) -> list[str]:
    return list(dict.fromkeys(["_kind", *spec.key, *spec.ordering.fields, *LINEAGE]))


def create_rebuild_keys_sql(spec: PipelineSpec) -> sql.Composed:
    """Drop what an abandoned rebuild of the pipeline kept and create the table empty."""
    types = stage_types(spec)
    columns = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(types[c])) for c in _columns(spec))
    return sql.SQL(
        "CREATE SCHEMA IF NOT EXISTS {schema}; DROP TABLE IF EXISTS {table}; CREATE TABLE {table} ({columns})"
    ).format(schema=sql.Identifier(STAGE_SCHEMA), table=rebuild_keys_identifier(spec), columns=columns)


def keep_rebuild_keys_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """Keep a rebuild batch's newest staged record per key; run after its merge, which made the
    records PostgreSQL refused dead letters (:mod:`reprocess.postgres.merge_refusals`)."""
    columns = sql.SQL(", ").join(map(sql.Identifier, _columns(spec)))
    return sql.SQL("INSERT INTO {table} ({columns}) SELECT {columns} FROM ({newest}) AS _n").format(
        table=rebuild_keys_identifier(spec), columns=columns, newest=newest_per_key(spec, stage)
    )


def drop_rebuild_keys_sql(spec: PipelineSpec) -> sql.Composed:
    return sql.SQL("DROP TABLE IF EXISTS {}").format(rebuild_keys_identifier(spec))
