"""The bench's independent oracle: what every case's table must hold, and how far it is off.

It imports nothing of the product (only :func:`bench.data.event`, the generator the topic was
produced from, and psycopg2): the expected state is each key's last record in its partition, a
tombstone deleting the key (Kafka's contract for a keyed topic). The expected rows go into a
temporary table of the bench database, and one query compares a case's table with it, so
a table of a million rows is checked in Postgres, not row by row in Python.

What counts as wrong (each row once, in this order):

- ``older_overwrote_newer``: the key's row carries an older version (``updated_at``) than its last record;
- ``deleted_came_back``: a row for a key whose last record is a tombstone;
- ``duplicates``: rows beyond the first of a key (a table without a primary key can hold them);
- ``missing``: a key whose last record is a row, and no row;
- ``other_wrong``: any other difference in version, status or amount.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from psycopg2 import sql

from bench.data import Dataset, event

WRONG_KINDS: Final = ("older_overwrote_newer", "deleted_came_back", "duplicates", "missing", "other_wrong")


@dataclass(frozen=True)
class Table:
    """A case's table and the names of its columns the oracle reads (text or typed: all are cast)."""

    schema: str
    name: str
    key: str = "order_id"
    updated_at: str = "updated_at"
    status: str = "status"
    amount: str = "amount"


def expected(ds: Dataset) -> dict[str, tuple[str, str, str] | None]:
    """key → (updated_at, status, amount) of its last record, or None when that is a tombstone."""
    out: dict[str, tuple[str, str, str] | None] = {}
    for i in range(ds.records):
        _part, key, ev = event(i, ds.orders)
        out[key] = None if ev is None else (ev["updated_at"], ev["status"], ev["amount"])
    return out


def _load(cur: Any, ds: Dataset) -> sql.Composable:
    """The expected state of ``ds`` as a temporary table (100,000 keys at N = 1 M: under a second)."""
    target = sql.Identifier("bench_expected")
    cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target))
    cur.execute(
        sql.SQL("CREATE TEMP TABLE {} (k text PRIMARY KEY, deleted boolean NOT NULL, updated_at timestamptz, "
                "status text, amount numeric)").format(target)
    )  # fmt: skip
    buf = io.StringIO()
    for key, state in expected(ds).items():
        buf.write(f"{key},t,,,\n" if state is None else f"{key},f,{state[0]},{state[1]},{state[2]}\n")
    buf.seek(0)
    cur.copy_expert(sql.SQL("COPY {} FROM STDIN WITH (FORMAT csv)").format(target).as_string(cur), buf)
    return target


def count_wrong(conn: Any, ds: Dataset, table: Table) -> dict[str, int]:
    """The case's wrong rows by kind (see the module doc) and their ``total``."""
    t = sql.SQL("{}.{}").format(sql.Identifier(table.schema), sql.Identifier(table.name))
    k, ts, st, am = (sql.Identifier(c) for c in (table.key, table.updated_at, table.status, table.amount))
    with conn, conn.cursor() as cur:
        oracle = _load(cur, ds)
        cur.execute(
            sql.SQL(
                "WITH got AS (SELECT {k}::text AS k, count(*) AS n, min({ts}::text::timestamptz) AS ts, "
                "min({st}::text) AS st, min({am}::text::numeric) AS am FROM {t} GROUP BY 1) "
                "SELECT count(*) FILTER (WHERE NOT o.deleted AND got.ts < o.updated_at), "
                "count(*) FILTER (WHERE o.deleted AND got.k IS NOT NULL), "
                "coalesce(sum(got.n - 1), 0), "
                "count(*) FILTER (WHERE NOT o.deleted AND got.k IS NULL), "
                "count(*) FILTER (WHERE NOT o.deleted AND got.k IS NOT NULL AND got.ts >= o.updated_at "
                "AND (got.ts, got.st, got.am) IS DISTINCT FROM (o.updated_at, o.status, o.amount)) "
                "FROM {o} AS o FULL JOIN got ON got.k = o.k"
            ).format(k=k, ts=ts, st=st, am=am, t=t, o=oracle)
        )
        row = cur.fetchone()
    counts = dict(zip(WRONG_KINDS, (int(x) for x in row), strict=True))
    counts["total"] = sum(counts.values())
    return counts


def counted_replays(conn: Any, ds: Dataset, table: Table, replay: Callable[[], float],
                    older_slice: Callable[[], object]) -> dict[str, Any]:  # fmt: skip
    """A peer's exactness after its load: the counts after the load, after ``replay`` (the same
    range again; it returns its seconds) and after ``older_slice`` (bench.slices), into the same table."""
    wrong_first = count_wrong(conn, ds, table)
    replay_seconds = replay()
    wrong = count_wrong(conn, ds, table)
    older_slice()
    return {"wrong_after_load": wrong_first, "wrong_after_replay": wrong, "replay_seconds": replay_seconds,
            "wrong_after_older_slice": count_wrong(conn, ds, table)}  # fmt: skip
