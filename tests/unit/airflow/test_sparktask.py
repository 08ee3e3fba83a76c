"""The Spark task picks its launcher from the connection's type (no Spark, no services)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from devstack.process import free_port
from reprocess.airflow.spark_task import SparkJobOperator
from reprocess.core.errors import ConnectionConfigError, SparkConnectError


def _task() -> SparkJobOperator:
    return SparkJobOperator(
        task_id="spark_job",
        job="reprocess.runner.spark_run:read_job",
        args={"spec": "/specs/orders.yaml", "run_id": "r1"},
        secrets={"db_url": "postgresql://u:secret@db/app"},
    )


def test_a_spark_connection_runs_spark_submit_with_secrets_only_in_the_environment(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    seen: dict[str, Any] = {}

    def execute(self: SparkSubmitOperator, context: Any) -> None:
        seen.update(application=self.application, args=self.application_args, env=self.env_vars)

    monkeypatch.setattr(SparkSubmitOperator, "execute", execute)
    _task().execute({})
    assert seen["application"].endswith("spark_apps/run_job.py")
    assert seen["args"] == ["reprocess.runner.spark_run:read_job", "--spec", "/specs/orders.yaml", "--run-id", "r1"]
    assert seen["env"] == {"REPROCESS_DB_URL": "postgresql://u:secret@db/app"}


def test_a_spark_connect_connection_to_a_dead_server_is_its_config_error_naming_the_url_and_make_services(
    monkeypatch,
):
    """Not retried (the retry policy fails a ConnectionConfigError at once); the cause is kept."""
    port = free_port()
    conn = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": port}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(conn))
    with pytest.raises(
        ConnectionConfigError, match=rf"^`spark_default` `sc://127\.0\.0\.1:{port}`: .*`make services`"
    ) as e:
        _task().execute({})
    assert isinstance(e.value.__cause__, SparkConnectError)
