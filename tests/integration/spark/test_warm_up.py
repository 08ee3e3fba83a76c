"""The Spark Connect server's warm-up (``reprocess.spark.warm_up``: ``make services`` runs it through
``devstack.connect.warm_up``, ``reprocess spark-connect start`` through the same function): it stages
through a run's own path on the running server, leaves no stage behind, and runs once per server start."""

from __future__ import annotations

import time
from typing import Any

import psycopg2

from devstack import connect
from devstack.process import pid_alive
from reprocess.spark import warm_up as warming


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
            (warming.TOPIC + "%",),
        )
        rows = cur.fetchall()
    pg.close()
    return rows


def test_warm_up_stages_once_per_server_start_and_leaves_no_stage(db_url: str, capsys: Any) -> None:
    """One stage, not the product's ten: the mechanism (once per start, nothing left) is the same, at a
    tenth of the cost in the 10-minute suite."""
    _wait_for_background_warm_up()
    server = pid_alive(connect.pidfile())
    assert server is not None, "the Spark Connect server is not running"
    connect.warmed_file().unlink(missing_ok=True)

    connect.warm_up(passes=1)

    out = capsys.readouterr().out
    assert "warmed up in" in out, out
    assert connect.warmed_file().read_text().strip() == str(server)
    assert _warm_up_stages(db_url) == []
    connect.warm_up(passes=1)  # the same server: nothing to do
    assert capsys.readouterr().out == ""


def _left_behind(db_url: str, prefix: str) -> dict[str, int]:
    """What the user's database holds under ``prefix``: stages, write records, pipeline, runs, ledger, target."""
    queries = {
        "stage tables": "SELECT count(*) FROM pg_tables WHERE schemaname = 'reprocess_stage' AND tablename LIKE %(p)s",
        "stage write records": "SELECT count(*) FROM reprocess.stage_writes WHERE stage LIKE %(p)s",
        "pipelines": "SELECT count(*) FROM reprocess.pipelines WHERE name LIKE %(p)s",
        "runs": "SELECT count(*) FROM reprocess.runs WHERE pipeline LIKE %(p)s",
        "ledger rows": "SELECT count(*) FROM reprocess.consumer_offsets WHERE pipeline LIKE %(p)s",
        "target schemas": "SELECT count(*) FROM pg_namespace WHERE nspname LIKE %(p)s",
    }
    with psycopg2.connect(db_url) as pg, pg.cursor() as cur:
        found = {}
        for what, query in queries.items():
            cur.execute(query, {"p": prefix + "%"})
            found[what] = cur.fetchone()[0]
    pg.close()
    return found


def test_a_run_after_a_warm_up_loads_what_the_oracle_expects_and_the_warm_up_leaves_nothing_behind(
    db_url: str, kafka_config: dict[str, Any], engine: Any
) -> None:
    """The warm-up at a start shares the session and the Python workers with the runs after it: it
    leaves no stage, write record, pipeline, run, ledger row or target of its own in the user's
    database, and a run afterwards loads exactly the oracle's rows, its ledger at the topic's ends."""
    import uuid

    from bench.context import RESULTS, Bench
    from bench.data import produce_dataset
    from bench.oracle import Table, count_wrong
    from bench.product import SparkConnect, product
    from reprocess.postgres.db import libpq_url

    _wait_for_background_warm_up()
    connect.warmed_file().unlink(missing_ok=True)

    connect.warm_up(passes=1)

    assert connect.warmed_file().exists(), "the warm-up did not run"
    left = _left_behind(db_url, warming.TOPIC)
    assert left == dict.fromkeys(left, 0), left
    bench = Bench(libpq_url(db_url), kafka_config, f"wu_{uuid.uuid4().hex[:8]}", RESULTS / "tests")
    ds = produce_dataset(bench.kafka, bench.tag, 200)  # 20 keys: one deleted, one with a late older version
    loaded = product(bench, ds, SparkConnect(), label="after_warm_up")
    name = f"{bench.tag}_after_warm_up"
    pg = psycopg2.connect(bench.db_url)
    try:
        assert count_wrong(pg, ds, Table(name, "orders"))["total"] == 0
        with pg.cursor() as cur:
            cur.execute("SELECT partition, next_offset FROM reprocess.consumer_offsets WHERE pipeline = %s", (name,))
            assert dict(cur.fetchall()) == ds.ends
    finally:
        pg.close()
    assert loaded.detail["records_read"] == 200
