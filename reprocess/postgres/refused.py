"""The stage writer's second layer: records PostgreSQL refuses at the COPY become dead letters.

The Spark job validates every value it can name (formats/, spark/transform.py), yet a value may
still pass it and be refused by PostgreSQL: a type or a constraint the checks do not know, a
transform's output. One such record would fail the task, the retries, and every later run of
its partition. So a COPY that fails for a record-level reason (SQLSTATE class 22, data exception;
class 23, integrity constraint violation) is undone to a savepoint and the batch is bisected
until each refused row is alone; that row is staged as a dead letter naming the column and
PostgreSQL's reason. Any other error (a lost connection: class 08; resources: 53; an operator
or a shutdown: 57; …) is the infrastructure's, and fails the task so that it is retried.

A refused row is the newest record of its key in the run (the dedupe ran before the COPY): the
key keeps its stored row, and the dead letter's lineage says which record to redrive. So every
refusal the Spark job can foresee is its own dead letter before the dedupe, where it lets the
key's older records of the run land, decoded or returned by a ``transform:``
(:func:`reprocess.formats.contract.unstorable_error_sql`: text or an array element holding a NUL,
json/jsonb text PostgreSQL's input refuses, jsonb's ``\\u0000``; a ``numeric(p,s)`` overflowing at
any precision; a key over the btree index row limit); this layer is for what no check knows.
"""

from __future__ import annotations

import io
import json
import logging
import re
from typing import TYPE_CHECKING, Any, Final

import psycopg2

from reprocess.core.stage_rows import DEAD, LINEAGE, STAGE_EXTRA

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

DATA_ERROR_CLASSES: Final = ("22", "23")
_ERROR_CHARS: Final = 400  # of PostgreSQL's message a dead letter keeps
_KEPT: Final = frozenset({*LINEAGE, *STAGE_EXTRA})  # what a refused row keeps besides _kind and _error


def is_data_error(exc: BaseException) -> bool:
    """A refusal of the record itself (SQLSTATE class 22 or 23), which a retry would meet again."""
    code = getattr(exc, "pgcode", None) or ""
    return isinstance(exc, psycopg2.Error) and code[:2] in DATA_ERROR_CLASSES


def refusal_text(exc: psycopg2.Error, row: pa.RecordBatch) -> str:
    """The dead letter's error: the column COPY names (its context: ``COPY t, line 1, column c: …``;
    for a NUL, which PostgreSQL refuses before splitting the line, the text column holding one),
    PostgreSQL's reason and SQLSTATE, escaped like every error text (no control character)."""
    diag = exc.diag
    column = diag.column_name or _context_column(diag.context or "") or _nul_column(row)
    where = f"column {column}" if column else "the row"
    reason = (diag.message_primary or str(exc)).strip()[:_ERROR_CHARS]
    reason = json.dumps(reason, ensure_ascii=False)[1:-1]
    return (
        f"stage error: PostgreSQL refused {where}: {reason} (SQLSTATE {exc.pgcode}); the Spark checks let it "
        "pass, so the record is a dead letter: redrive it once the target can hold it"
    )


def _nul_column(row: pa.RecordBatch) -> str | None:
    import pyarrow as pa

    for name, column in zip(row.schema.names, row.columns, strict=True):
        value = column[0].as_py() if pa.types.is_string(column.type) else None
        if isinstance(value, str) and "\x00" in value:
            return name
    return None


def _context_column(context: str) -> str | None:
    found = re.search(r"\bcolumn (\w+)", context)
    return found.group(1) if found else None


def as_dead_letter(row: pa.RecordBatch, error: str) -> pa.RecordBatch:
    """A one-row batch turned into its dead letter: ``_kind`` dead, ``_error``, lineage, record count
    and raw bytes kept, every spec column NULL."""
    import pyarrow as pa

    arrays = []
    for name, column in zip(row.schema.names, row.columns, strict=True):
        if name == "_kind":
            arrays.append(pa.array([DEAD], type=column.type))
        elif name == "_error":
            arrays.append(pa.array([error], type=pa.string()))
        elif name in _KEPT:
            arrays.append(column)
        else:
            arrays.append(pa.nulls(1, type=column.type))
    return pa.RecordBatch.from_arrays(arrays, names=row.schema.names)


class IsolatingCopy:
    """COPYs Arrow batches into one stage inside the caller's transaction, each under a savepoint;
    a batch refused for a record-level reason is bisected and its refused rows staged as dead
    letters (:attr:`refused` counts them). Every input row ends as one stage row."""

    def __init__(self, cursor: Any, statement: str) -> None:
        self.cursor = cursor
        self.statement = statement
        self.refused = 0

    def copy(self, batch: pa.RecordBatch) -> None:
        self.cursor.execute("SAVEPOINT reprocess_stage_copy")
        try:
            self._write(batch)
        except psycopg2.Error as exc:
            if not is_data_error(exc):
                raise
            self.cursor.execute("ROLLBACK TO SAVEPOINT reprocess_stage_copy")
            self.cursor.execute("RELEASE SAVEPOINT reprocess_stage_copy")
            self._isolate(batch, exc)
        else:
            self.cursor.execute("RELEASE SAVEPOINT reprocess_stage_copy")

    def _isolate(self, batch: pa.RecordBatch, exc: psycopg2.Error) -> None:
        if batch.num_rows == 1:
            self._write(as_dead_letter(batch, refusal_text(exc, batch)))  # a dead letter refused too fails the task
            self.refused += 1
            return
        half = batch.num_rows // 2
        self.copy(batch.slice(0, half))
        self.copy(batch.slice(half))

    def _write(self, batch: pa.RecordBatch) -> None:
        import pyarrow.csv as pacsv

        buffer = io.BytesIO()
        pacsv.write_csv(batch, buffer, pacsv.WriteOptions(include_header=False))
        buffer.seek(0)
        self.cursor.copy_expert(self.statement, buffer, size=1 << 20)
