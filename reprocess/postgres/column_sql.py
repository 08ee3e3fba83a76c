"""How SQL over a pipeline's tables treats a column by its type, where the type changes the SQL."""

from __future__ import annotations

from psycopg2 import sql

from reprocess.core.column_types import ColumnType


def comparable(value: sql.Composable, kind: ColumnType | None) -> sql.Composable:
    """``value`` as a row comparison (``IS DISTINCT FROM``) can take it: ``json`` has no equality
    operator, so it compares as its text, which ``json`` keeps exactly as written (``jsonb``
    compares by value, its own equality: key order and whitespace do not make a row differ).

    Examples
    --------
    >>> comparable(sql.SQL("t.doc"), ColumnType.JSON)
    Composed([SQL('('), SQL('t.doc'), SQL(')::text')])
    """
    if kind is ColumnType.JSON:
        return sql.SQL("({})::text").format(value)
    return value
