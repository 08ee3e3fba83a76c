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


@dataclass(frozen=True, slots=True)
class StageCopier:
    """``df.mapInArrow(StageCopier(...), COPIED_SCHEMA)``: each Spark task COPYs its Arrow
    batches into the stage in ONE transaction and yields how many rows it wrote.

    A plain function over ``mapInArrow`` rather than a Python data source writer: the writer
    costs two extra Python planner processes per job (write plan, commit), ~2 s of a small run.
    ``dsn_env`` names the environment variable holding the libpq URL, so the password never
    appears in the query plan or the Spark UI.
    """

    table: str
    columns: tuple[str, ...]
    dsn_env: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import psycopg2
        import pyarrow as pa
        import pyarrow.csv as pacsv

        schema_name, _, table = self.table.partition(".")
        copy = sql.SQL("COPY {}.{} ({}) FROM STDIN WITH (FORMAT csv)").format(
            sql.Identifier(schema_name), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, self.columns))
        )
        options = pacsv.WriteOptions(include_header=False)
        rows = 0
        conn = psycopg2.connect(os.environ[self.dsn_env])
        try:
            with conn, conn.cursor() as cur:
                statement = copy.as_string(cur)
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    buffer = io.BytesIO()
                    pacsv.write_csv(batch, buffer, options)
                    buffer.seek(0)
                    cur.copy_expert(statement, buffer, size=1 << 20)
                    rows += batch.num_rows
        finally:
            conn.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


COPIED_SCHEMA: Final = "rows bigint"
