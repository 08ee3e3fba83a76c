"""The Debezium PostgreSQL connector on the embedded Kafka Connect worker, reading a source
database of the embedded PostgreSQL (DESIGN §5): what the CDC tests and the demo stream from.

The source is its own database (``cdc_source``), never the application's, as in production
where Debezium reads the team's database. Each connector gets its own replication slot and
publication, named after it; :func:`remove` drops both with the connector, because an
abandoned slot makes PostgreSQL keep every WAL segment from its position on, forever.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from devstack import kafka_connect, postgres
from devstack.process import ServiceError

SOURCE_DB: Final = "cdc_source"
CONNECTOR_CLASS: Final = "io.debezium.connector.postgresql.PostgresConnector"
# Slot and publication names: PostgreSQL allows lower-case letters, digits and '_' in slot names.
NAME_PATTERN: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# Debezium's error when a connector's stored position is older than its replication slot.
SLOT_GONE: Final = "no longer available on the server"


def _connect(dbname: str) -> Any:
    import psycopg2

    return psycopg2.connect(host="127.0.0.1", port=postgres.port(), user=postgres.SUPERUSER,
                            password=postgres.password(), dbname=dbname)  # fmt: skip


def source_dsn() -> str:
    """libpq URL of the source database (the generated password included: for tests and the demo)."""
    return f"postgresql://{postgres.SUPERUSER}:{postgres.password()}@127.0.0.1:{postgres.port()}/{SOURCE_DB}"


def ensure_source() -> None:
    """Create the source database once; fail with the fix when the server cannot decode its WAL."""
    conn = _connect("postgres")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW wal_level")
            (level,) = cur.fetchone()
            if level != "logical":
                raise ServiceError(
                    f"postgres on 127.0.0.1:{postgres.port()} runs with wal_level={level}; Debezium needs logical. "
                    "It was started before devstack set it: restart it with `make stop && make services`"
                )
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (SOURCE_DB,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{SOURCE_DB}"')
    finally:
        conn.close()


def _checked(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise ServiceError(
            f"Debezium connector name {name!r} cannot name a replication slot: use 1-63 lower-case letters, "
            "digits and '_', not starting with a digit"
        )
    return name


def connector_config(name: str, tables: Iterable[str], topic_prefix: str, **overrides: str) -> dict[str, str]:
    """The connector ``name`` streaming ``tables`` (``schema.table``) of :data:`SOURCE_DB` into topics
    ``<topic_prefix>.<schema>.<table>``, with the worker's JSON converter unless ``overrides`` say
    otherwise (any Debezium or converter setting, e.g. ``value.converter.schemas.enable="true"``)."""
    return {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": "127.0.0.1",
        "database.port": str(postgres.port()),
        "database.user": postgres.SUPERUSER,
        "database.password": kafka_connect.secret_path(postgres.pg_dir(), "password"),
        "database.dbname": SOURCE_DB,
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(re.escape(t) for t in tables),
        "slot.name": _checked(name),
        "publication.name": name,
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "tombstones.on.delete": "true",
        **overrides,
    }


def start(name: str, config: Mapping[str, str]) -> None:
    """Create the source database if needed, then the connector; returns once its task runs."""
    ensure_source()
    drop_orphan_slots(keep=_checked(name))
    if _slot_lost(name):
        # PostgreSQL's cap on the WAL an idle slot may hold (max_slot_wal_keep_size) invalidated it
        # while its connector was away: Debezium would wait forever for it to become valid.
        print(f"debezium: {name}'s replication slot fell behind PostgreSQL's WAL cap and was invalidated; "
              "starting it over with a snapshot")  # fmt: skip
        remove(name)
    try:
        kafka_connect.put_connector(name, config)
    except ServiceError as exc:
        if SLOT_GONE not in str(exc):
            raise
        # Its offsets outlived its slot (dropped as an orphan while the worker had forgotten it):
        # they point at WAL the server no longer keeps. Start over with a snapshot of the tables.
        print(f"debezium: {name}'s replication slot was dropped since its last run; starting it over with a snapshot")
        remove(name)
        kafka_connect.put_connector(name, config)


def _slot_lost(name: str) -> bool:
    """Whether ``name``'s replication slot is invalidated (its WAL removed): unusable, never valid again."""
    conn = _connect(SOURCE_DB)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT wal_status = 'lost' FROM pg_replication_slots WHERE slot_name = %s", (name,))
            row = cur.fetchone()
    finally:
        conn.close()
    return bool(row and row[0])


def drop_orphan_slots(keep: str) -> list[str]:
    """Drop the idle replication slots of the source database that no connector of the worker owns
    (but ``keep``'s, which a connector re-created after a crash resumes from). The worker forgets
    its connectors when it stops; their slots would keep WAL until PostgreSQL's cap."""
    owned = {keep, *kafka_connect.request("GET", "/connectors")}
    conn = _connect(SOURCE_DB)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s AND NOT active", (SOURCE_DB,))
            orphans = [slot for (slot,) in cur.fetchall() if slot not in owned]
            for slot in orphans:
                cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    finally:
        conn.close()
    return orphans


def remove(name: str, seconds: float = 30) -> None:
    """Remove the connector (and its offsets), then its replication slot and publication."""
    kafka_connect.remove_connector(_checked(name))
    conn = _connect(SOURCE_DB)
    conn.autocommit = True
    deadline = time.monotonic() + seconds
    try:
        with conn.cursor() as cur:
            # The task's replication connection may still hold the slot for a moment after the stop.
            while True:
                cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (name,))
                row = cur.fetchone()
                if row is None:
                    break
                if row[0] is None:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (name,))
                    break
                if time.monotonic() > deadline:
                    raise ServiceError(f"replication slot {name} still in use by pid {row[0]} after {seconds:.0f}s")
                time.sleep(0.2)
            cur.execute(f'DROP PUBLICATION IF EXISTS "{name}"')
    finally:
        conn.close()
