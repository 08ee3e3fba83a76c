"""The orders backfill on a real Spark standalone cluster (a master and two workers, here).

``spark_default`` points at ``spark://127.0.0.1:<port>`` in client mode, as a team would point
it at its cluster: the driver runs in the Airflow task, the executors in the workers' JVMs with
their own Python workers, which import the library from the wheel installed in the workers'
environment (``devstack.standalone``), not from this checkout. The result must equal the same
oracle as on ``local`` and on Connect.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from devstack import standalone
from reprocess.kafka import demo_data
from tests.support.helpers import assert_matches_oracle, log_ends, orders_spec, run_dag, runs

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]


def test_orders_backfill_on_a_standalone_cluster_equals_the_oracle(
    cluster, kafka_config, engine, unique_name, monkeypatch, capfd
):
    for name, value in standalone.job_env().items():
        monkeypatch.setenv(name, value)
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 4)
    produced = demo_data.produce(
        kafka_config, unique_name, 4, demo_data.order_events(400, 5, seed=17), transactional_every=300
    )
    finished_before = {app["id"] for app in standalone.state()["completedapps"]}

    started = time.monotonic()
    dag_run = run_dag(spec, "backfill")
    print(f"orders backfill on {standalone.master_url()}: {time.monotonic() - started:.1f} s (dag.test)")

    assert dag_run.state == "success"
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    # The task log says what Ivy resolved in one line, without its ~30-line report.
    task_log = "".join(capfd.readouterr())
    assert "Ivy resolved the --packages coordinates: " in task_log
    assert "found org.apache.spark#spark-sql-kafka" not in task_log and ":: resolution report ::" not in task_log
    (run,) = runs(engine, spec)
    assert run.state == "committed" and run.records_read == len(produced.messages)

    # The job was an application of the cluster, and its executors ran on both workers.
    (app,) = [a for a in standalone.state()["completedapps"] if a["id"] not in finished_before]
    assert app["name"] == f"reprocess-{spec.name}" and app["state"] == "FINISHED", app
    hosts = [p for p in (standalone.home() / "work").glob(f"worker-*/{app['id']}/*") if p.is_dir()]
    assert {p.parent.parent.name for p in hosts} == {f"worker-{i}" for i in range(standalone.WORKERS)}, hosts
    # Spark's Kafka source came by its coordinates (--packages: Ivy names a jar group_artifact-version).
    fetched = {j.name for host in hosts for j in host.glob("*.jar")}
    assert "org.apache.spark_spark-sql-kafka-0-10_2.13-4.2.0.jar" in fetched, fetched
    # Their Python imports the library from the installed wheel, not from the checkout.
    where = subprocess.run(
        [str(standalone.executor_python()), "-c", "import reprocess; print(reprocess.__file__)"],
        cwd=hosts[0], capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(standalone.home() / "python"), where
