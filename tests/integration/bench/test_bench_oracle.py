"""The bench's exactness oracle on a real PostgreSQL: a table holding the expected state counts
nothing wrong, and each kind of damage a peer can do is counted as that kind, once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from psycopg2 import sql

from bench.data import Dataset
from bench.oracle import Table, count_wrong, expected

RECORDS = 400  # 40 keys: 2 deleted by tombstones, 2 with a late older version


@pytest.fixture
def conn(db_url: str) -> Iterator[Any]:
    c = psycopg2.connect(db_url)
    yield c
    c.close()


def _fill(conn: Any, schema: str, ds: Dataset) -> Table:
    """A table like the JDBC sink's (every column text), holding exactly the expected state."""
    table = Table(schema, "orders")
    t = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier("orders"))
    with conn, conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        cur.execute(sql.SQL("CREATE TABLE {} (order_id text, updated_at text, status text, amount text)").format(t))
        for key, state in expected(ds).items():
            if state is not None:
                cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(t), (key, *state))
    return table


def test_oracle_counts_each_kind_of_wrong_row(conn: Any, unique_name: str) -> None:
    ds = Dataset("t", RECORDS, RECORDS // 10, {}, 0.0)
    table = _fill(conn, unique_name, ds)
    try:
        assert count_wrong(conn, ds, table)["total"] == 0
        t = sql.SQL("{}.orders").format(sql.Identifier(unique_name))
        with conn, conn.cursor() as cur:
            # an older version over the newest (key 1), a deleted key back (key 3), a duplicate
            # (key 4), a missing key (key 5), a wrong status at the right version (key 6)
            cur.execute(sql.SQL("UPDATE {} SET updated_at = '2026-11-01T00:00:00Z' WHERE order_id = 'o-00000001'")
                        .format(t))  # fmt: skip
            cur.execute(
                sql.SQL("INSERT INTO {} VALUES ('o-00000003', '2026-11-01T00:00:00Z', 'paid', '1.00')").format(t)
            )
            cur.execute(sql.SQL("INSERT INTO {} SELECT * FROM {} WHERE order_id = 'o-00000004'").format(t, t))
            cur.execute(sql.SQL("DELETE FROM {} WHERE order_id = 'o-00000005'").format(t))
            cur.execute(sql.SQL("UPDATE {} SET status = 'lost' WHERE order_id = 'o-00000006'").format(t))
        got = count_wrong(conn, ds, table)
        assert got == {"older_overwrote_newer": 1, "deleted_came_back": 1, "duplicates": 1, "missing": 1,
                       "other_wrong": 1, "total": 5}  # fmt: skip
    finally:
        with conn, conn.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(unique_name)))


def test_oracle_compares_an_extra_column_with_the_given_states(conn: Any, unique_name: str) -> None:
    """The CDC case's oracle: the model table's large column compared too, a placeholder in its place wrong."""
    ds = Dataset("t", RECORDS, RECORDS // 10, {}, 0.0)
    states = {k: None if v is None else (*v, f"body of {k}") for k, v in expected(ds).items()}
    t = sql.Identifier(unique_name, "orders")
    table = Table(unique_name, "orders", extra=("body",))
    with conn, conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(unique_name)))
        cur.execute(sql.SQL("CREATE TABLE {} (order_id text, updated_at text, status text, amount text, body text)")
                    .format(t))  # fmt: skip
        for key, state in states.items():
            if state is not None:
                cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s)").format(t), (key, *state))
    try:
        assert count_wrong(conn, ds, table, states)["total"] == 0
        with conn, conn.cursor() as cur:
            cur.execute(sql.SQL("UPDATE {} SET body = '__debezium_unavailable_value' WHERE order_id = 'o-00000002'")
                        .format(t))  # fmt: skip
        got = count_wrong(conn, ds, table, states)
        assert got == {"older_overwrote_newer": 0, "deleted_came_back": 0, "duplicates": 0, "missing": 0,
                       "other_wrong": 1, "total": 1}  # fmt: skip
    finally:
        with conn, conn.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(unique_name)))
