"""The Spark Connect server's warm-up (``devstack.connect.warm_up``, run by ``make services``): it
stages through a run's own path on the running server, leaves no stage behind, and runs once per
server start."""

from __future__ import annotations

import time
from typing import Any

import psycopg2

from devstack import connect
from devstack.process import pid_alive


def _wait_for_background_warm_up(timeout_s: float = 600) -> None:
    """The session's `make services` may have started one: two at once would share a stage."""
    deadline = time.monotonic() + timeout_s
    while pid_alive(connect.warm_up_pidfile()) is not None:
        assert time.monotonic() < deadline, "the background warm-up did not finish"
        time.sleep(1)


def _warm_up_stages(db_url: str) -> list[Any]:
    with psycopg2.connect(db_url) as pg, pg.cursor() as cur:
        cur.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'reprocess_stage' AND tablename LIKE %s",
            (connect.WARM_UP_TOPIC + "%",),
        )
        rows = cur.fetchall()
    pg.close()
    return rows


def test_warm_up_stages_once_per_server_start_and_leaves_no_stage(db_url: str, capsys: Any) -> None:
    _wait_for_background_warm_up()
    server = pid_alive(connect.pidfile())
    assert server is not None, "the Spark Connect server is not running"
    connect.warmed_file().unlink(missing_ok=True)

    connect.warm_up()

    out = capsys.readouterr().out
    assert "warmed up in" in out, out
    assert connect.warmed_file().read_text().strip() == str(server)
    assert _warm_up_stages(db_url) == []
    connect.warm_up()  # the same server: nothing to do
    assert capsys.readouterr().out == ""
