"""``reprocess spark-connect start|status|stop`` from the venv's installed command: a server of its own
on a free port and a scratch state folder (~15-25 s to start), holding this library's fingerprint,
reading Kafka through Spark's Kafka source, logging no Spark INFO line by default, and gone after stop."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.process import free_port
from reprocess.core.processes import pid_alive, port_open
from reprocess.kafka import demo_data
from reprocess.spark.connect import FINGERPRINT_CONF, check_library, client_env, library_fingerprint

pytestmark = [pytest.mark.integration("spark"), pytest.mark.integration("kafka")]

COMMAND = Path(sys.executable).parent / "reprocess"


def _run(action: str, where: list[str], *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMMAND), "spark-connect", action, *where, *more], capture_output=True, text=True,
                          timeout=240)  # fmt: skip


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    where = ["--host", "127.0.0.1", "--port", str(free_port()), "--state-dir", str(tmp_path / "connect")]
    try:
        yield where, tmp_path / "connect"
    finally:
        _run("stop", where)


def test_the_command_starts_a_server_holding_this_library_that_reads_kafka_and_stops_it(
    server: tuple[list[str], Path], kafka_config: dict[str, Any], unique_name: str
) -> None:
    where, state = server
    url = f"sc://127.0.0.1:{where[3]}"
    # No warm-up: it would stage in the session's shared database beside the tests (test_warm_up.py proves it).
    started = _run("start", where)
    assert started.returncode == 0 and f"started at {url}" in started.stdout, started.stdout + started.stderr
    assert "warming up" not in started.stdout, started.stdout

    status = _run("status", where, "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    found = json.loads(status.stdout)
    assert (found["url"], found["running"], found["matches"]) == (url, True, True)
    assert found["served"] == library_fingerprint()
    assert "already running" in _run("start", where).stdout  # same library: the server is kept

    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(5, 1))
    from pyspark.sql import SparkSession

    with client_env():
        spark = SparkSession.builder.remote(url).create()
        try:
            check_library(spark, url)  # the conf jobs check holds this library's fingerprint
            assert spark.conf.get(FINGERPRINT_CONF) == library_fingerprint()
            assert spark.range(3).count() == 3
            read = spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_config["bootstrap.servers"])
            assert read.option("subscribe", unique_name).load().count() == len(produced.messages)
        finally:
            spark.client.close()
    log = (state / "server.log").read_text()
    assert " INFO " not in log, log[-3000:]  # [reprocess] spark_log_level's default: WARN

    pid = pid_alive(state / "server.pid")
    stopped = _run("stop", where)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
    assert pid is not None and pid_alive(state / "server.pid") is None and not port_open(int(where[3]))
    gone = _run("status", where)
    assert gone.returncode == 1 and "not running" in gone.stdout, gone.stdout
