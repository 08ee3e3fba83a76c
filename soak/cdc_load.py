"""The CDC source's workload: small transactions on the source table without pause (inserts,
updates, deletes, primary-key changes, updates that leave the large ``notes`` unchanged), a few
thousand row changes a minute. PostgreSQL is killed now and then: a failed transaction is retried
on a new connection once the server is back (a transaction either committed or did not)."""

from __future__ import annotations

import random
import threading
import time
from typing import Final

import psycopg2

ROWS: Final = 2_000
NEW_KEYS: Final = 1_000_000  # primary-key changes move a row above this


def create_table(dsn: str, table: str) -> None:
    """The source table and its first rows (the connector's snapshot)."""
    conn = psycopg2.connect(dsn)
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL, balance numeric(12, 2), "
                    "tier text, notes text)")  # fmt: skip
        cur.execute(f"ALTER TABLE {table} ALTER COLUMN notes SET STORAGE EXTERNAL")
        cur.execute(f"INSERT INTO {table} SELECT i, 'customer ' || i, i * 1.25, 'basic', "
                    f"CASE WHEN i % 10 = 0 THEN repeat(md5(i::text), 100) ELSE 'note ' || i END "
                    f"FROM generate_series(1, {ROWS}) AS i")  # fmt: skip
    conn.close()


class CdcWorkload(threading.Thread):
    """Changes ``table`` about ``per_minute`` rows a minute until :meth:`stop`."""

    def __init__(self, dsn: str, table: str, per_minute: int, seed: int) -> None:
        super().__init__(name=f"cdc-{table}", daemon=True)
        self.dsn, self.table, self.per_minute = dsn, table, per_minute
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.changes = self.retries = 0
        self.next_id = ROWS + 1

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def run(self) -> None:
        conn = None
        per_tx = 10
        interval = 60.0 * per_tx / self.per_minute
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                if conn is None:
                    conn = psycopg2.connect(self.dsn, connect_timeout=5)
                with conn, conn.cursor() as cur:
                    for _ in range(per_tx):
                        cur.execute(*self.change())
                self.changes += per_tx
            except psycopg2.Error:
                self.retries += 1
                conn = None
                time.sleep(1)
                continue
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
        if conn is not None:
            conn.close()

    def change(self) -> tuple[str, tuple[object, ...]]:
        """One statement and its values; ids are drawn so most of them hit an existing row."""
        t, roll = self.table, self.rng.random()
        some = self.rng.randrange(1, self.next_id)
        if roll < 0.25:
            self.next_id += 1
            return (f"INSERT INTO {t} VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                    (self.next_id - 1, f"customer {self.next_id - 1}", self.rng.randrange(10**6) / 100, "basic",
                     f"note {self.rng.random()}"))  # fmt: skip
        if roll < 0.70:  # notes unchanged: a large one arrives as Debezium's placeholder
            return (
                f"UPDATE {t} SET balance = %s, tier = %s WHERE id = %s",
                (self.rng.randrange(10**6) / 100, self.rng.choice(["basic", "gold", "silver", None]), some),
            )
        if roll < 0.85:
            return f"UPDATE {t} SET name = %s, notes = %s WHERE id = %s", (f"renamed {self.rng.random()}", None, some)
        if roll < 0.95:
            return f"DELETE FROM {t} WHERE id = %s", (some,)
        return (f"UPDATE {t} SET id = id + {NEW_KEYS} WHERE id = %s AND id < {NEW_KEYS} "
                f"AND NOT EXISTS (SELECT 1 FROM {t} WHERE id = %s)", (some, some + NEW_KEYS))  # fmt: skip
