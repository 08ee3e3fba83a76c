"""PostgreSQL access built in one place: engines, the schema migrations, raw COPY cursors."""

from __future__ import annotations

import logging
import re
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, Final

import psycopg2.extensions
from sqlalchemy import Connection, Engine, create_engine, text

from reprocess.core.errors import QueryResultError

log = logging.getLogger(__name__)

# Package data: the migrations travel inside the wheel, found wherever the package is installed.
SQL_DIR: Final = files("reprocess.sql")
_MIGRATION: Final = re.compile(r"^[0-9]{3}_.*\.sql$")
_MIGRATION_LOCK: Final = 0x5E9C0_0001  # advisory lock id: one migrator at a time


def sqlalchemy_url(url: str) -> str:
    """Normalise an Airflow connection URI (``postgres://``) to the psycopg2 dialect."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+psycopg2://", url)


def libpq_url(url: str) -> str:
    """The same URL as libpq/psycopg2 understands it (no SQLAlchemy dialect suffix)."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url)


def make_engine(url: str) -> Engine:
    """An engine with pre-ping, so a restarted server costs one reconnect, not a failed task."""
    return create_engine(sqlalchemy_url(url), pool_pre_ping=True, pool_size=2, max_overflow=2)


def migrate(engine: Engine, sql_dir: Traversable = SQL_DIR) -> list[str]:
    """Apply ``sql/NNN_*.sql`` in order, each once; returns the versions applied now."""
    applied_now: list[str] = []
    with engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        conn.execute(text("CREATE SCHEMA IF NOT EXISTS reprocess"))
        conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS reprocess.schema_migrations "
                "(version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
        )
        done = set(conn.execute(text("SELECT version FROM reprocess.schema_migrations")).scalars())
        for path in sorted((p for p in sql_dir.iterdir() if _MIGRATION.match(p.name)), key=lambda p: p.name):
            version = path.name.removesuffix(".sql")
            if version in done:
                continue
            conn.exec_driver_sql(path.read_text())
            conn.execute(text("INSERT INTO reprocess.schema_migrations (version) VALUES (:v)"), {"v": version})
            applied_now.append(version)
    if applied_now:
        log.info("migrations applied: %s", ", ".join(applied_now))
    return applied_now


def pg_cursor(conn: Connection) -> psycopg2.extensions.cursor:
    """A psycopg2 cursor in ``conn``'s transaction, for composed SQL (``psycopg2.sql``), COPY and rowcounts."""
    raw = conn.connection.dbapi_connection
    if not isinstance(raw, psycopg2.extensions.connection):
        raise TypeError(f"expected a psycopg2 connection, got {type(raw).__name__}; use a postgresql+psycopg2 URL")
    return raw.cursor()


def one_row(cur: psycopg2.extensions.cursor) -> tuple[Any, ...]:
    """The row of a query that always returns exactly one (an aggregate, ``to_regclass``)."""
    row = cur.fetchone()
    if row is None:
        raise QueryResultError(f"expected one row from {cur.query!r}, got none")
    return row


# The rights a pipeline's login needs on each kind of object Postgres names in "permission denied for ...".
_GRANTS: Final = {
    "schema": "CREATE, USAGE ON SCHEMA",
    "table": "SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON TABLE",
    "sequence": "USAGE, SELECT, UPDATE ON SEQUENCE",
    "database": "CONNECT, CREATE ON DATABASE",
}


def grant_for(reason: str, login: str) -> str:
    """The fix of Postgres's "permission denied for <kind> <name>" for ``login``.

    Examples
    --------
    >>> grant_for("permission denied for schema sales", "etl")
    'run `GRANT CREATE, USAGE ON SCHEMA sales TO etl`'
    >>> grant_for("must be owner of table orders", "etl")
    'grant etl the right it lacks (must be owner of table orders)'
    """
    denied = re.search(r"permission denied for (\w+) (\S+)", reason)
    if denied is None or denied.group(1) not in _GRANTS:
        return f"grant {login} the right it lacks ({reason})"
    return f"run `GRANT {_GRANTS[denied.group(1)]} {denied.group(2)} TO {login}`"
