"""devstack's PostgreSQL follows the port asked for, not the pid file of an earlier start.

A shell that exported other ports (a second checkout's, a fresh clone's) used to leave the
server on those ports while ``make test`` with the defaults printed "already running" and then
found nothing on its port.
"""

from __future__ import annotations

from pathlib import Path

import psycopg2
import pytest

from devstack import postgres
from devstack.process import free_port


def _listens(port: int) -> bool:
    try:
        psycopg2.connect(
            host="127.0.0.1", port=port, user=postgres.SUPERUSER, password=postgres.password(), dbname="postgres"
        ).close()
    except psycopg2.OperationalError:
        return False
    return True


def test_a_start_with_another_port_restarts_the_server_on_that_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROCESS_STATE_DIR", str(tmp_path))
    first, second = free_port(), free_port()
    monkeypatch.setenv(postgres.PORT_ENV, str(first))
    postgres.start()
    try:
        assert _listens(first)
        monkeypatch.setenv(postgres.PORT_ENV, str(second))
        postgres.start()
        assert _listens(second) and not _listens(first)
        assert postgres.running_port() == second
    finally:
        postgres.stop()
