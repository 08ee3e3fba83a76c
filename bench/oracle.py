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

import csv
import io
from collections.abc import Callable, Mapping
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
    extra: tuple[str, ...] = ()  # more columns compared as text (their expected values follow the amount's)


State = tuple[str, ...] | None  # (updated_at, status, amount, *the extra columns) of a key, None: deleted


def expected(ds: Dataset) -> dict[str, State]:
    """key → (updated_at, status, amount) of its last record, or None when that is a tombstone."""
    out: dict[str, State] = {}
    for i in range(ds.records):
        _part, key, ev = event(i, ds.orders)
        out[key] = None if ev is None else (ev["updated_at"], ev["status"], ev["amount"])
    return out


def _load(cur: Any, states: Mapping[str, State], extra: int) -> sql.Composable:
    """The expected ``states`` as a temporary table (100,000 keys at N = 1 M: under a second), the
    extra columns as ``e0``, ``e1``, …"""
    target = sql.Identifier("bench_expected")
    cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target))
    more = sql.SQL("").join(sql.SQL(", {} text").format(sql.Identifier(f"e{i}")) for i in range(extra))
    cur.execute(
        sql.SQL("CREATE TEMP TABLE {} (k text PRIMARY KEY, deleted boolean NOT NULL, updated_at timestamptz, "
                "status text, amount numeric{})").format(target, more)
    )  # fmt: skip
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    for key, state in states.items():
        out.writerow([key, "t", *[""] * (3 + extra)] if state is None else [key, "f", *state])
    buf.seek(0)
    cur.copy_expert(sql.SQL("COPY {} FROM STDIN WITH (FORMAT csv)").format(target).as_string(cur), buf)
    return target


def count_wrong(conn: Any, ds: Dataset, table: Table, states: Mapping[str, State] | None = None) -> dict[str, int]:
    """The case's wrong rows by kind (see the module doc) and their ``total``; ``states``: the
    expected state of each key (default: :func:`expected`), with a value per ``table.extra`` column."""
    t = sql.SQL("{}.{}").format(sql.Identifier(table.schema), sql.Identifier(table.name))
    k, ts, st, am = (sql.Identifier(c) for c in (table.key, table.updated_at, table.status, table.amount))
    extra = [sql.Identifier(c) for c in table.extra]
    got_extra = sql.SQL("").join(sql.SQL(", min({}::text) AS {}").format(c, sql.Identifier(f"e{i}"))
                                 for i, c in enumerate(extra))  # fmt: skip
    got_cols = sql.SQL("got.ts, got.st, got.am") + sql.SQL("").join(
        sql.SQL(", got.{}").format(sql.Identifier(f"e{i}")) for i in range(len(extra))
    )
    want_cols = sql.SQL("o.updated_at, o.status, o.amount") + sql.SQL("").join(
        sql.SQL(", o.{}").format(sql.Identifier(f"e{i}")) for i in range(len(extra))
    )
    with conn, conn.cursor() as cur:
        oracle = _load(cur, expected(ds) if states is None else states, len(extra))
        cur.execute(
            sql.SQL(
                "WITH got AS (SELECT {k}::text AS k, count(*) AS n, min({ts}::text::timestamptz) AS ts, "
                "min({st}::text) AS st, min({am}::text::numeric) AS am{got_extra} FROM {t} GROUP BY 1) "
                "SELECT count(*) FILTER (WHERE NOT o.deleted AND got.ts < o.updated_at), "
                "count(*) FILTER (WHERE o.deleted AND got.k IS NOT NULL), "
                "coalesce(sum(got.n - 1), 0), "
                "count(*) FILTER (WHERE NOT o.deleted AND got.k IS NULL), "
                "count(*) FILTER (WHERE NOT o.deleted AND got.k IS NOT NULL AND got.ts >= o.updated_at "
                "AND ({got_cols}) IS DISTINCT FROM ({want_cols})) "
                "FROM {o} AS o FULL JOIN got ON got.k = o.k"
            ).format(
                k=k, ts=ts, st=st, am=am, t=t, o=oracle, got_extra=got_extra, got_cols=got_cols, want_cols=want_cols
            )
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
