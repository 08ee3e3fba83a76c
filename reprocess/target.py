"""SQL for a pipeline's target table: its DDL and the idempotent merge from the stage.

Identifiers come from the spec and go through ``psycopg2.sql.Identifier``; values are bound.
"""

from __future__ import annotations

from psycopg2 import sql

from reprocess.spec import OrderingMode, PipelineSpec
from reprocess.transform import DEAD, LINEAGE, ROW

_LINEAGE_DDL = (
    "_kafka_topic text NOT NULL, _kafka_partition int NOT NULL, _kafka_offset bigint NOT NULL, "
    "_kafka_timestamp timestamptz, _run_id text NOT NULL, _updated_at timestamptz NOT NULL DEFAULT now()"
)


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


def _newer_than_existing(spec: PipelineSpec) -> sql.Composable:
    """``(existing order fields) < (incoming order fields)``: replays never clobber newer rows.

    Offset order is only meaningful while a key stays on one partition; a partition-count
    change moves keys, which is why a spec can order by a version/event-time column instead.
    """
    fields = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    if spec.ordering is OrderingMode.COLUMN:
        assert spec.ordering_column is not None
        fields = [spec.ordering_column, *fields]
    target = sql.Identifier(spec.target_table)
    return sql.SQL("({}) < ({})").format(
        sql.SQL(", ").join(sql.SQL("{}.{}").format(target, sql.Identifier(f)) for f in fields),
        sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(sql.Identifier(f)) for f in fields),
    )


def merge_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """Stage → target upsert; binds ``run_id``.

    ``DISTINCT ON (key)`` guards against a stage that holds a key twice (a Spark task that
    committed its COPY and was then re-run): ``ON CONFLICT DO UPDATE`` must not touch a row
    twice in one statement. The ``WHERE`` keeps the newer of stage and target.
    """
    payload = [c.name for c in spec.columns]
    all_cols = [*payload, *LINEAGE]
    order = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    if spec.ordering is OrderingMode.COLUMN:
        assert spec.ordering_column is not None
        order = [spec.ordering_column, *order]
    ident = sql.Identifier
    return sql.SQL(
        "INSERT INTO {target} AS {alias} ({cols}, _run_id) "
        "SELECT DISTINCT ON ({key}) {cols}, %(run_id)s FROM {stage} WHERE _kind = {row} "
        "ORDER BY {key}, {order_desc} "
        "ON CONFLICT ({key}) DO UPDATE SET {updates}, _run_id = EXCLUDED._run_id, _updated_at = now() "
        "WHERE {newer}"
    ).format(
        target=target_identifier(spec),
        alias=ident(spec.target_table),
        cols=sql.SQL(", ").join(map(ident, all_cols)),
        key=sql.SQL(", ").join(map(ident, spec.key)),
        stage=stage,
        row=sql.Literal(ROW),
        order_desc=sql.SQL(", ").join(sql.SQL("{} DESC").format(ident(f)) for f in order),
        updates=sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(ident(c), ident(c)) for c in all_cols if c not in spec.key
        ),
        newer=_newer_than_existing(spec),
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
