"""The run-scoped stage: an UNLOGGED table that Spark executors fill with COPY.

A stage belongs to one run (its name derives from the run id). The Spark job drops and
re-creates it before writing, so a retried attempt never doubles rows; the commit drops it.
Each Spark task COPYs its rows in one transaction, so a failed task leaves nothing behind.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from psycopg2 import sql
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceWriter, WriterCommitMessage

from reprocess.spec import PipelineSpec
from reprocess.transform import stage_columns

if TYPE_CHECKING:
    import pyarrow as pa
    from psycopg2.extensions import connection as PgConnection

log = logging.getLogger(__name__)

STAGE_SCHEMA: Final = "reprocess_stage"


def stage_identifier(spec: PipelineSpec, run_id: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(STAGE_SCHEMA), sql.Identifier(spec.stage_table(run_id)))


def create_stage(conn: PgConnection, spec: PipelineSpec, run_id: str) -> None:
    """(Re)create the run's stage empty: whatever a dead attempt left is dropped first."""
    types = {c.name: c.type.value for c in spec.columns}
    types.update(
        {
            "_kind": "text",
            "_kafka_topic": "text",
            "_kafka_partition": "int",
            "_kafka_offset": "bigint",
            "_kafka_timestamp": "timestamptz",
            "_records": "bigint",
            "_error": "text",
            "_raw_key": "text",
            "_raw_value": "text",
        }
    )
    table = stage_identifier(spec, run_id)
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(types[c])) for c in stage_columns(spec)
    )
    with conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(STAGE_SCHEMA)))
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(table, columns))


def drop_stage(conn: Any, spec: PipelineSpec, run_id: str) -> None:
    with conn.cursor() as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage_identifier(spec, run_id)))


@dataclass
class StagedRows(WriterCommitMessage):
    rows: int


class PgStageDataSource(DataSource):
    """``df.write.format("pg-stage")``: COPY Arrow batches into an existing stage table.

    Options: ``table`` (schema.table), ``columns`` (comma-separated, in DataFrame order) and
    ``dsnEnv``: the name of the environment variable that holds the libpq URL, so the
    password never appears in the query plan or the Spark UI.
    """

    @classmethod
    def name(cls) -> str:
        return "pg-stage"

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        schema_name, _, table = self.options["table"].partition(".")
        return PgStageWriter(schema_name, table, self.options["columns"].split(","), self.options["dsnEnv"])


class PgStageWriter(DataSourceArrowWriter):
    def __init__(self, schema_name: str, table: str, columns: list[str], dsn_env: str) -> None:
        self.schema_name, self.table, self.columns, self.dsn_env = schema_name, table, columns, dsn_env

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRows:
        import psycopg2
        import pyarrow.csv as pacsv

        copy = sql.SQL("COPY {}.{} ({}) FROM STDIN WITH (FORMAT csv)").format(
            sql.Identifier(self.schema_name),
            sql.Identifier(self.table),
            sql.SQL(", ").join(map(sql.Identifier, self.columns)),
        )
        options = pacsv.WriteOptions(include_header=False)
        rows = 0
        conn = psycopg2.connect(os.environ[self.dsn_env])
        try:
            with conn, conn.cursor() as cur:
                statement = copy.as_string(cur)
                for batch in iterator:
                    if batch.num_rows == 0:
                        continue
                    buffer = io.BytesIO()
                    pacsv.write_csv(batch, buffer, options)
                    buffer.seek(0)
                    cur.copy_expert(statement, buffer, size=1 << 20)
                    rows += batch.num_rows
        finally:
            conn.close()
        return StagedRows(rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.rows for m in messages if isinstance(m, StagedRows))
        log.info("stage table=%s.%s rows=%d tasks=%d", self.schema_name, self.table, total, len(messages))
