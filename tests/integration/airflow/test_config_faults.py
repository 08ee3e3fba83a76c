"""A configuration fault fails its run at the first task that meets it, in one attempt, and the run
note (and ``runs.error``, where the run has a row) says the cause, the connection's name and address
(never its password) and the fix: a retry cannot change the answer, and its backoff only delays it.

One real ``dag.test()`` run per fault, each service reached through a connection set as a user
sets it (``AIRFLOW_CONN_*``): a port nobody listens on, a wrong password, a role without rights on
the target's schema. The task's retry delay is cut to a second, so the unfixed code's retries show
(as ``try_number`` > 1) without waiting minutes; the retry policy decides whether there are any.

A missing ``spark`` pool is not here: no task fails on it (the scheduler leaves the Spark task in
``scheduled``, and ``dag.test()`` ignores pools). Its run note says so at the run's start with the
fix, and the run goes on once the pool exists (``test_init.py``, the listener's run-start hook).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg2
import pytest
import yaml

from devstack.process import free_port
from reprocess.formats.specs import read_spec
from reprocess.kafka import demo_data
from tests.support.helpers import orders_spec, runs

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("airflow")]

SECRET = "not-the-password-7f3a"  # a wrong password: the note must never show it


@dataclass(frozen=True)
class Fault:
    """How a connection is broken (``break_it`` returns what the note must name), the task that meets
    it first, and the parts of the note that say the cause and the fix."""

    break_it: Callable[[pytest.MonkeyPatch, str], str]
    task: str
    cause: str
    fix: str
    needs_records: bool = False  # the task runs only when the run has something to read
    avro: bool = False


def _kafka_refused(monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    servers = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": servers}})
    )
    return f"`kafka_default` `bootstrap.servers={servers}`"


def _db_url(**change: str) -> str:
    parts = urlsplit(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    user = change.get("user", parts.username or "")
    password = change.get("password", parts.password or "")
    return f"postgresql://{user}:{password}@{parts.hostname}:{parts.port}{parts.path}"


def _db_setting(user: str) -> str:
    parts = urlsplit(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    return f"`reprocess_db` `host={parts.hostname} port={parts.port} schema={parts.path.lstrip('/')} login={user}`"


def _wrong_password(monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_REPROCESS_DB", _db_url(password=SECRET))
    return _db_setting(urlsplit(os.environ["AIRFLOW_CONN_REPROCESS_DB"]).username or "")


def _spark_down(monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    port = free_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": port})
    )
    return f"`spark_default` `sc://127.0.0.1:{port}`"


def _registry_refused(monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    monkeypatch.setenv("AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT", json.dumps({"conn_type": "http", "host": url}))
    return f"`schema_registry_default` `host={url}`"


def _no_rights_on_the_target_schema(monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    """A login that may use the app's bookkeeping schema but not create the target in its schema
    (made by an administrator beforehand, as a DBA would)."""
    role = f"fault_{uuid.uuid4().hex[:8]}"
    with _admin() as cur:
        cur.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        cur.execute(f"GRANT CONNECT, CREATE ON DATABASE {urlsplit(_db_url()).path.lstrip('/')} TO {role}")
        cur.execute(f"GRANT USAGE, CREATE ON SCHEMA reprocess TO {role}")
        cur.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA reprocess TO {role}")
        cur.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA reprocess TO {role}")
        cur.execute(f"CREATE SCHEMA {name}")
        cur.execute(f"GRANT USAGE ON SCHEMA {name} TO {role}")
    monkeypatch.setenv("AIRFLOW_CONN_REPROCESS_DB", _db_url(user=role, password="pw"))
    return _db_setting(role)


class _admin:
    """A cursor of the suite's own login (the database's owner), autocommit; ``url`` when the
    connection is broken by then."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or _db_url()

    def __enter__(self) -> Any:
        self.conn = psycopg2.connect(self.url)
        self.conn.autocommit = True
        return self.conn.cursor()

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


FAULTS = {
    "kafka_broker_unreachable": Fault(
        _kafka_refused, "plan_offsets", "connection refused", "check the connection's extra"
    ),
    "postgres_wrong_password": Fault(
        _wrong_password, "plan_offsets", "password authentication failed", "check the connection's host, port"
    ),
    "spark_connect_server_down": Fault(
        _spark_down,
        "spark_read_stage",
        "connection refused",
        "check the connection's host and port",
        needs_records=True,
    ),
    "schema_registry_unreachable": Fault(
        _registry_refused,
        "spark_read_stage",
        "connection refused",
        "check the connection's host (the registry's URL)",
        needs_records=True,
        avro=True,
    ),
    "no_create_on_the_target_schema": Fault(
        _no_rights_on_the_target_schema, "plan_offsets", "permission denied for schema", "GRANT CREATE, USAGE ON SCHEMA"
    ),
}


@pytest.fixture
def dropped_roles() -> Iterator[None]:
    url = _db_url()  # the suite's own login, before a fault replaces it
    yield
    with _admin(url) as cur:
        cur.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'fault\\_%'")
        for (role,) in cur.fetchall():
            cur.execute(f"DROP OWNED BY {role}; DROP ROLE {role}")


def _avro_spec(name: str, topic: str) -> Any:
    raw = {"name": name, "topics": [topic], "format": "avro", "key": ["id"], "target_table": f"{name}.orders",
           "columns": {"id": "bigint"}}  # fmt: skip
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return read_spec(path)


@pytest.mark.integration("spark")
@pytest.mark.parametrize("fault", list(FAULTS), ids=list(FAULTS))
def test_a_configuration_fault_fails_its_first_task_once_and_the_note_names_the_connection_and_the_fix(
    fault, kafka_config, engine, unique_name, monkeypatch, dropped_roles
):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    case = FAULTS[fault]
    spec = (_avro_spec if case.avro else orders_spec)(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    if case.needs_records:
        demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(5, 1), malformed=())
    setting = case.break_it(monkeypatch, unique_name)
    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).dags[spec.dag_id("backfill")]
    for task in dag.tasks:  # the unfixed code's retries show without minutes of backoff
        task.retry_delay, task.retry_exponential_backoff = timedelta(seconds=1), 0

    dr = dag.test()

    ti = dr.get_task_instance(case.task)
    assert (dr.state, ti.state, ti.try_number) == ("failed", "failed", 1), (dr.state, ti.state, ti.try_number)
    with create_session() as session:
        note = DagRun.find(dag_id=dr.dag_id, run_id=dr.run_id, session=session)[0].note or ""
    reports = Path(os.environ["REPROCESS_STATE_DIR"]) / "test-reports"  # the note beside the test reports
    reports.mkdir(parents=True, exist_ok=True)
    (reports / f"config-fault-{fault}.txt").write_text(note)
    said = f"ConnectionConfigError at {case.task}: {setting}: "
    assert said in note and case.cause in note and case.fix in note, note
    assert SECRET not in note
    rows = runs(engine, spec)
    if rows:  # the run got its row before the fault: it is failed with the same words
        (run,) = rows
        assert run.state == "failed" and said in run.error and case.cause in run.error, run.error
