"""Session fixtures on real services: Postgres, Kafka and the Spark Connect server, started with
``devstack`` (as ``make services`` does; a Connect server holding an older library is restarted).

A missing service fails the session; nothing is skipped. Each test gets its own topic and
its own Postgres schema for target tables, so tests never see each other's data.

``make test`` runs the suite on two pytest-xdist workers and, beside them, the ``lane`` tests one
at a time in a process of their own, the ``cluster_lane`` tests likewise in another and the
``install_lane`` test in a third; then the ``serial`` tests alone. Each process has its own
application and Airflow databases and Airflow home; the services are shared.
A file's tests stay on one worker (``--dist loadfile``: module fixtures such as a second broker
are made once). A test that restarts or kills a service every test uses (Postgres, the Spark
Connect server), or the registry (tests of two lanes use it), is ``serial``; one that uses a
service only some tests use and some of them kill (Kafka Connect) is ``lane``; one that runs the
standalone cluster (fixed ports), or uses the registry without Kafka Connect, is ``cluster_lane``;
one that runs an Airflow of its own from a venv it builds (test_readme_install.py) is
``install_lane``, in a third lane.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.tiers import long_tier_ids

REPO = Path(__file__).resolve().parent.parent


def _load_env() -> None:
    """Apply scripts/env.sh to this process (pytest may be started without sourcing it)."""
    out = subprocess.run(
        ["bash", "-c", f"source {REPO}/scripts/env.sh && env -0"], capture_output=True, check=True
    ).stdout
    for item in out.split(b"\0"):
        if b"=" in item:
            key, _, value = item.decode().partition("=")
            os.environ[key] = value


def _worker_suffix() -> str:
    """``_gw0``… on a pytest-xdist worker, ``_<lane>`` in a lane of its own beside the lane
    (``REPROCESS_TEST_LANE``, scripts/run_tests.sh), empty otherwise: each process's own databases."""
    worker = os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("REPROCESS_TEST_LANE")
    return f"_{worker}" if worker else ""


# Kafka Connect, which some of its tests kill: the tests using it run one at a time, in the lane. The
# standalone cluster (fixed ports) likewise, in a lane of its own, with the tests that use the registry
# without Kafka Connect: the lane was the suite's critical path (~1,035 s of ~20 min on CI), and none
# of these stops what the lane uses (the one test restarting the registry is serial).
# test_readme_install.py (an Airflow of its own per end of the wheel's range, 3-10 min each) is `install_lane`, with
# test_openlineage.py, which must run before any other DAG run of its process (its docstring).
LANE_FIXTURES = frozenset({"kafka_connect", "debezium_connector"})
CLUSTER_FIXTURES = frozenset({"cluster", "schema_registry"})


# The files that take longest on a worker (50-115 s each in `make test`), longest first. They are
# handed out first (scripts/run_tests.sh keeps this order: --no-loadscope-reorder): xdist's own
# order (most tests first) started the one-test files last, and the run ended with one worker
# on test_ui_browser and the cores 50-86 % idle for its last ~100 s.
LONG_FILES = (
    "test_progress.py", "test_reconcile.py", "test_faults.py", "test_end_to_end.py", "test_airflow_home.py",
    "test_coverage.py", "test_wheel.py", "test_validate.py", "test_batches.py", "test_spark_connect_command.py",
    "test_task_retries.py", "test_transforms.py",
)  # fmt: skip


# The long tier (`make test-all` runs it; `make test` leaves it out): the test ids, or files, that
# tests/long_tier.txt lists, one per line (`#` starts a comment): the ones over 60 s in the measured
# runs (scripts/test_times.py, docs/testing.md), the install, the standalone cluster, the CDC lives.


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``lane`` the tests that use Kafka Connect, ``cluster_lane`` the others that run the
    standalone cluster or use the registry, ``long`` those of the long tier, and put the long files first."""
    long_tier = long_tier_ids()
    for item in items:
        if item.nodeid.startswith(long_tier):
            item.add_marker(pytest.mark.long)
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("serial") or item.get_closest_marker("install_lane"):
            continue
        if LANE_FIXTURES & fixtures:
            item.add_marker(pytest.mark.lane)
        elif CLUSTER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.cluster_lane)
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: the rest keep their order


# The services a failed test's report shows the logs of (scripts/test_report.py): every test reads
# through the first three; the others only when the test asks for their fixture.
SHARED_SERVICES = ("postgres", "kafka", "spark-connect")
SERVICE_FIXTURES = {
    "kafka_connect": "kafka-connect", "debezium_connector": "kafka-connect", "schema_registry": "registry",
    "cluster": "spark-cluster",
}  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Record in the JUnit XML the test's id, when it started and which services it used, so the
    report of a failure can show those services' log lines of the same seconds."""
    fixtures = set(getattr(item, "fixturenames", ()))
    extra = sorted({service for name, service in SERVICE_FIXTURES.items() if name in fixtures})
    item.user_properties.append(("nodeid", item.nodeid))
    item.user_properties.append(("started", datetime.now().isoformat(timespec="seconds")))
    item.user_properties.append(("services", " ".join((*SHARED_SERVICES, *extra))))


def pytest_sessionstart(session: pytest.Session) -> None:
    from devstack.cli import main as services

    assert services(["start"]) == 0, "the embedded services did not start (see above)"
    if os.environ.get("PYTEST_XDIST_WORKER") is None and getattr(session.config.option, "numprocesses", None):
        return  # the xdist controller runs no test: its workers make their own databases
    suffix = _worker_suffix()
    os.environ.setdefault("REPROCESS_APP_DB", f"reprocess_test{suffix}")
    os.environ.setdefault("REPROCESS_AIRFLOW_DB", f"airflow_test{suffix}")
    os.environ.setdefault("AIRFLOW_HOME", str(REPO / ".state" / "airflow_test"))
    if suffix:  # not the default home: two workers must not write one airflow.cfg at once
        os.environ["AIRFLOW_HOME"] = str(REPO / ".state" / f"airflow_test{suffix}")
    _load_env()
    # Airflow stops a DAG file's parse after [core] dagbag_import_timeout (30 s) of wall clock, which a loaded
    # machine passes: beside a second suite (load 20), 40 pipelines took over 30 s and the wheel's DAG file
    # lost its DAGs. No test here checks Airflow's timeout; test_dags holds the parse's CPU seconds to it.
    os.environ.setdefault("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "600")
    # Module fixtures write their pipeline specs here (a test, in its own folder: own_pipelines_dir);
    # the DAG file builds DAGs from them. One folder per session, so two concurrent sessions never
    # delete each other's specs.
    pipelines = REPO / ".state" / "test_pipelines" / str(os.getpid())
    shutil.rmtree(pipelines, ignore_errors=True)
    pipelines.mkdir(parents=True)
    os.environ["REPROCESS_PIPELINES_DIR"] = str(pipelines)
    _create_database(os.environ["REPROCESS_APP_DB"], fresh=True)
    _create_database(os.environ["REPROCESS_AIRFLOW_DB"], fresh=False)
    from devstack.airflow_db import prepare_airflow

    prepare_airflow(slots=1)  # as `make demo` does, on this session's metadata DB


def _create_database(name: str, fresh: bool) -> None:
    import psycopg2

    admin_url = os.environ["AIRFLOW_CONN_REPROCESS_DB"].rsplit("/", 1)[0] + "/postgres"
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        if fresh:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if cur.fetchone() is None:
            cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()


@pytest.fixture(scope="session")
def kafka_config() -> dict[str, Any]:
    from reprocess.airflow.hooks import KafkaConfigHook

    return KafkaConfigHook().client_config()


@pytest.fixture(scope="session")
def db_url() -> str:
    return os.environ["AIRFLOW_CONN_REPROCESS_DB"]


@pytest.fixture(scope="session")
def engine(db_url: str) -> Iterator[Any]:
    from reprocess.postgres.db import make_engine, migrate

    eng = make_engine(db_url)
    migrate(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """test name + short uuid: a topic/schema/pipeline name no other test uses."""
    base = request.node.name.lower().replace("[", "_").replace("]", "").replace("-", "_")[:30]
    return f"{base}_{uuid.uuid4().hex[:6]}"


@pytest.fixture(autouse=True)
def own_pipelines_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test writes its specs into a folder of its own. ``dag.test()`` parses the whole DAG
    folder and syncs every DAG it builds to the database, so with one folder per session each
    run cost more than the last (8 s of parsing and syncing 268 DAGs at a worker's 67th spec)."""
    monkeypatch.setenv("REPROCESS_PIPELINES_DIR", str(tmp_path_factory.mktemp("pipelines")))


@pytest.fixture(scope="session")
def kafka_connect() -> str:
    """The Kafka Connect worker (Debezium's PostgreSQL connector on its plugin path), started on
    demand like ``python scripts/services.py start kafka-connect``; left running for the next
    session, stopped by ``make stop``. Its REST URL."""
    from devstack import kafka_connect

    kafka_connect.start()
    return kafka_connect.url()


@pytest.fixture
def debezium_connector(kafka_connect: str) -> Iterator[Any]:
    """``start(name, config)`` of devstack.debezium, its source database made; every connector a test
    started is removed at the end with its replication slot and publication, so no slot keeps WAL."""
    from devstack import debezium as dbz

    dbz.ensure_source()
    started: list[str] = []

    def start(name: str, config: dict[str, str]) -> None:
        started.append(name)
        dbz.start(name, config)

    yield start
    for name in started:
        dbz.remove(name)


@pytest.fixture(scope="session")
def cluster() -> Iterator[None]:
    """The Spark standalone cluster (``devstack.standalone``: a master and two workers), started once
    for the session's cluster tests (test_task_retries, test_standalone_cluster) and stopped at its
    end: started and stopped per module, the lane paid the three JVMs' start twice."""
    from devstack import standalone

    standalone.start()
    yield
    standalone.stop()


@pytest.fixture(scope="session")
def schema_registry() -> str:
    """Apicurio Registry, started on demand (``python scripts/services.py start registry``), left running
    for the next session, stopped by ``make stop``. Its Confluent-compatible URL, for
    ``SchemaRegistryClient({"url": …})``. Its storage is durable: use subjects no other test uses."""
    from devstack import registry

    registry.start()  # returns at once while another lane's start is under way (its pidfile written)
    deadline = time.monotonic() + registry.START_TIMEOUT_S
    while not registry.ready():
        assert time.monotonic() < deadline, f"the registry at {registry.url()} did not answer (log {registry.log()})"
        time.sleep(0.5)
    return registry.ccompat_url()
