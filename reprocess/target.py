"""SQL for a pipeline's target table: its DDL and the idempotent merge from the stage.

Identifiers come from the spec and go through ``psycopg2.sql.Identifier``; values are bound.
"""

from __future__ import annotations

from typing import Final

from psycopg2 import sql

from reprocess.spec import PipelineSpec
from reprocess.transform import DEAD, LINEAGE, ROW

_LINEAGE_DDL = (
    "_kafka_topic text NOT NULL, _kafka_partition int NOT NULL, _kafka_offset bigint NOT NULL, "
    "_kafka_timestamp timestamptz, _run_id text NOT NULL, _updated_at timestamptz NOT NULL DEFAULT now(), "
    "_spec_version int"
)
# Every column the pipeline itself maintains (never a spec column).
LINEAGE_COLUMNS: Final = frozenset({*LINEAGE, "_run_id", "_updated_at", "_spec_version"})


def target_identifier(spec: PipelineSpec) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(spec.target_schema), sql.Identifier(spec.target_table))


def create_target_sql(spec: PipelineSpec) -> sql.Composed:
    """Idempotent DDL: natural key as primary key, payload columns and lineage columns."""
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}{}").format(
            sql.Identifier(c.name), sql.SQL(c.type.value), sql.SQL(" NOT NULL" if c.name in spec.key else "")
        )
        for c in spec.columns
    )
    return sql.SQL(
        "CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE IF NOT EXISTS {table} ({columns}, {lineage}, "
        "PRIMARY KEY ({key}))"
    ).format(
        schema=sql.Identifier(spec.target_schema),
        table=target_identifier(spec),
        columns=columns,
        lineage=sql.SQL(_LINEAGE_DDL),
        key=sql.SQL(", ").join(map(sql.Identifier, spec.key)),
    )


def merge_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """Stage → target upsert; binds ``run_id`` and ``spec_version`` (the lineage of the derivation).

    ``DISTINCT ON (key)`` guards against a stage that holds a key twice (a Spark task that
    committed its COPY and was then re-run): ``ON CONFLICT DO UPDATE`` must not touch a row
    twice in one statement. Both the ``DISTINCT ON`` order and the ``WHERE`` come from the
    pipeline's :class:`~reprocess.ordering.Ordering`, so the stage's winner and the target's
    comparison are the same rule: replays of older records change nothing.
    """
    payload = [c.name for c in spec.columns]
    all_cols = [*payload, *LINEAGE]
    ident = sql.Identifier
    return sql.SQL(
        "INSERT INTO {target} AS {alias} ({cols}, _run_id, _spec_version) "
        "SELECT DISTINCT ON ({key}) {cols}, %(run_id)s, %(spec_version)s FROM {stage} WHERE _kind = {row} "
        "ORDER BY {key}, {order_desc} "
        "ON CONFLICT ({key}) DO UPDATE SET {updates}, _run_id = EXCLUDED._run_id, "
        "_spec_version = EXCLUDED._spec_version, _updated_at = now() "
        "WHERE {newer}"
    ).format(
        target=target_identifier(spec),
        alias=ident(spec.target_table),
        cols=sql.SQL(", ").join(map(ident, all_cols)),
        key=sql.SQL(", ").join(map(ident, spec.key)),
        stage=stage,
        row=sql.Literal(ROW),
        order_desc=spec.ordering.newest_first_sql(),
        updates=sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(ident(c), ident(c)) for c in all_cols if c not in spec.key
        ),
        newer=spec.ordering.newer_sql(ident(spec.target_table), sql.SQL("EXCLUDED")),
    )


def dead_letters_sql(stage: sql.Composable) -> sql.Composed:
    """Stage dead rows → ``reprocess.dead_letters``; binds ``pipeline`` and ``run_id``."""
    return sql.SQL(
        "INSERT INTO reprocess.dead_letters "
        '(pipeline, topic, partition, "offset", run_id, key, value, error, kafka_timestamp) '
        "SELECT %(pipeline)s, _kafka_topic, _kafka_partition, _kafka_offset, %(run_id)s, "
        "decode(_raw_key, 'hex'), decode(_raw_value, 'hex'), _error, _kafka_timestamp "
        "FROM {stage} WHERE _kind = {dead} "
        'ON CONFLICT (pipeline, topic, partition, "offset") DO NOTHING'
    ).format(stage=stage, dead=sql.Literal(DEAD))


def stage_counts_sql(stage: sql.Composable) -> sql.Composed:
    """(records read, good rows staged, dead letters) from the stage."""
    return sql.SQL(
        "SELECT coalesce(sum(_records), 0), count(*) FILTER (WHERE _kind = {row}), "
        "count(*) FILTER (WHERE _kind = {dead}) FROM {stage}"
    ).format(stage=stage, row=sql.Literal(ROW), dead=sql.Literal(DEAD))
