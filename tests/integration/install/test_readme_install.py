"""The README's install steps (in full: docs/getting-started/install.md), followed literally by a
team whose Airflow is the lowest, then the highest release the wheel's declared range allows among
those the package registry serves (``tests/support/airflow_releases.py``: today 3.3.0 and 3.3.2): the
wheel moves none of its packages, and its first backfill commits.

A fresh venv gets ``apache-airflow[postgres]==<release>`` resolved by pip alone (Airflow's own
constraints files are served from its source repository, not from a package registry, and only the
registries are reachable here), then the built wheel, with its dependencies. The wheel is built once
for both releases; pip's cache keeps later venvs off the network for the downloads (pyspark's 450 MB
sdist is built once); what is left per release is pip's resolution and writing the 1.3 GB venv
(pyspark's jars are most of it), no bytecode compiled. A release's venv is removed once its tests end.

That venv is then the team's Airflow: a scratch ``AIRFLOW_HOME`` runs ``airflow standalone`` on
loopback with the settings the install page names, the connections are stored in its metadata DB with
``airflow connections add`` (none in the environment), ``reprocess spark-connect start`` and
``reprocess init`` run from the venv, a spec lands in a folder of its own, and a backfill triggered
over the REST API ends committed with rows equal to the oracle (the produced records); then
``reprocess status`` answers from the stored connections. Each step's time goes to
``$REPROCESS_STATE_DIR/test-reports/readme-install-<release>.txt``. tests/unit/docs/test_install_page.py
checks, without the venv, that the page gives this test's DAG file, commands and REST bodies.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg2
import pytest

import devstack.wheel
from devstack.airflow_ui import session_members, signal_all
from devstack.process import free_port, pid_alive, spawn, stop_pid, wait_for_port
from reprocess.kafka import demo_data
from tests.support import airflow_http, oracle
from tests.support.airflow_releases import declared_range, range_ends, served_releases

# Needs the package registry (PyPI) and the shared Postgres and Kafka. A lane of its own beside the
# Debezium lane: a venv build is disk and CPU, and its Airflow's scheduler runs for minutes.
pytestmark = [pytest.mark.integration("pypi"), pytest.mark.integration("airflow"), pytest.mark.install_lane]

REPO = Path(__file__).resolve().parents[3]
PIPELINE = "readme_orders"
RUN_TIMEOUT_S = 420


@dataclass
class TeamAirflow:
    """The team's venv holding one Airflow release, then the wheel."""

    release: str  # the apache-airflow version the venv got first
    venv: Path
    before: dict[str, str]  # distribution -> version, Airflow alone
    after: dict[str, str]  # the same after the wheel
    dry_run: str  # what `pip install --dry-run` said it would install
    wheel_seconds: float  # `pip wheel`, once for both releases
    seconds: float  # Airflow's venv made, the wheel's dry run and install


@dataclass
class Transcript:
    """Each README step with its wall time, written where the test reports are; ``before`` is the
    time of the steps made before the test (the wheel, the venv), counted in the total."""

    before: float
    lines: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def step(self, what: str, since: float) -> float:
        now = time.monotonic()
        self.lines.append(f"{now - since:7.1f} s  {what}")
        return now

    def write(self, release: str) -> None:
        folder = Path(os.environ["REPROCESS_STATE_DIR"]) / "test-reports"
        folder.mkdir(parents=True, exist_ok=True)
        total = f"{self.before + time.monotonic() - self.started:7.1f} s  in all"
        (folder / f"readme-install-{release}.txt").write_text("\n".join([*self.lines, total]) + "\n")


def _pip(venv: Path, *args: str) -> str:
    """The project venv's pip acting on ``venv`` (which gets no pip of its own)."""
    cmd = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True)
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _versions(venv: Path) -> dict[str, str]:
    """name -> version of every distribution in ``venv`` (``pip list`` as JSON: ``pip freeze`` prints a
    wheel installed from a file as ``name @ file://…``)."""
    return {d["name"].lower(): d["version"] for d in json.loads(_pip(venv, "list", "--format=json"))}


@pytest.fixture(scope="module")
def airflow_range_ends() -> tuple[str, str]:
    """The lowest and the highest release of the wheel's Airflow range that the registry serves."""
    return range_ends(declared_range(REPO / "pyproject.toml"), served_releases())


@pytest.fixture(scope="module", params=["lowest", "highest"])
def airflow_release(request: pytest.FixtureRequest, airflow_range_ends: tuple[str, str]) -> str:
    lowest, highest = airflow_range_ends
    if request.param == "highest" and highest == lowest:
        pytest.skip(f"the registry serves one release of the wheel's Airflow range, {lowest}: run as the lowest")
    return lowest if request.param == "lowest" else highest


@pytest.fixture(scope="module")
def readme_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """README step 1's ``pip wheel``, once for both releases; the seconds it took."""
    started = time.monotonic()
    return devstack.wheel.build(tmp_path_factory.mktemp("dist")), time.monotonic() - started


@pytest.fixture(scope="module")
def team_airflow(
    airflow_release: str, readme_wheel: tuple[Path, float], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TeamAirflow]:
    """README step 1: the wheel's dry run, then its install into the team's Airflow venv (removed
    afterwards: 1.3 GB a release)."""
    wheel, wheel_seconds = readme_wheel
    started = time.monotonic()
    venv = tmp_path_factory.mktemp(f"airflow-{airflow_release}")
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)], check=True)
    _pip(venv, "install", "-q", "--no-compile", f"apache-airflow[postgres]=={airflow_release}")
    before = _versions(venv)
    dry_run = _pip(venv, "install", "--dry-run", "--no-compile", str(wheel))
    _pip(venv, "install", "-q", "--no-compile", str(wheel))
    seconds = time.monotonic() - started
    yield TeamAirflow(airflow_release, venv, before, _versions(venv), dry_run, wheel_seconds, seconds)
    shutil.rmtree(venv, ignore_errors=True)


def test_the_wheel_installs_beside_each_end_of_its_airflow_range_and_changes_none_of_its_packages(
    team_airflow: TeamAirflow, tmp_path: Path
) -> None:
    release, before, after = team_airflow.release, team_airflow.before, team_airflow.after
    assert before["apache-airflow"] == release, before
    moved = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    assert moved == {}, f"installing the wheel changed packages of Airflow {release}: {moved}"
    added = set(after) - set(before)
    assert {"reprocess", "pyspark", "pyspark-client", "apache-airflow-providers-apache-spark"} <= added, added
    # The dry run announced exactly that: the packages it added, at the versions they got.
    (would,) = [line for line in team_airflow.dry_run.splitlines() if line.startswith("Would install ")]
    announced = {item.rsplit("-", 1)[0].lower().replace("_", "-") for item in would.split()[2:]}
    assert announced == {name.replace("_", "-") for name in added}, (announced, added, would)
    # pyspark and pyspark-client write the same files: one version (pyproject.toml pins both).
    assert after["pyspark"] == after["pyspark-client"], (after["pyspark"], after["pyspark-client"])
    assert not any(name.startswith("reprocess-devstack") for name in after), sorted(added)
    _pip(team_airflow.venv, "check")

    # The package imports against that Airflow: the DAG factory and the plugin, as Airflow loads them.
    probe = "import airflow, reprocess.airflow.factory, reprocess.plugins.plugin; print(airflow.__version__)"
    python = team_airflow.venv / "bin" / "python"
    ran = subprocess.run([python, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    said = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0 and ran.stdout.splitlines()[-1] == release, said


# ------------------------------------------------------------------------------------ the first backfill


def _fresh_database(name: str) -> dict[str, Any]:
    """An empty database on the suite's Postgres; its connection fields (host, port, login, password, schema)."""
    url = urllib.parse.urlsplit(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    fields = {"host": url.hostname, "port": url.port, "login": url.username, "password": url.password}
    conn = psycopg2.connect(host=url.hostname, port=url.port, user=url.username, password=url.password,
                            dbname="postgres")  # fmt: skip
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return fields | {"schema": name}


def _team_env(venv: Path, home: Path) -> dict[str, str]:
    """The team's shell: no variable of this checkout's (no ``AIRFLOW_*``, no ``REPROCESS_*``), the
    venv first on the PATH, and the Airflow settings the README's install section names."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "REPROCESS_", "PYTHON", "SPARK_"))}
    api_port = free_port()
    metadata = _fresh_database("readme_airflow")
    return keep | {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "AIRFLOW_HOME": str(home / "airflow"),
        "XDG_STATE_HOME": str(home / "state"),  # where `reprocess spark-connect` keeps its pid and log
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
            f"postgresql+psycopg2://{metadata['login']}:{metadata['password']}@{metadata['host']}:{metadata['port']}"
            f"/{metadata['schema']}"
        ),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",  # not the README's: fewer DAGs to parse here
        "AIRFLOW__REPROCESS__PIPELINES_DIR": str(home / "specs"),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://localhost:{api_port}",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        # The checkout's copies of Spark's Kafka source (the README's offline form), not Maven Central.
        "REPROCESS_SPARK_JARS": os.environ["REPROCESS_SPARK_JARS"],
    }


def _run(env: dict[str, str], cwd: Path, *cmd: str, code: int = 0) -> str:
    done = subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True)
    assert done.returncode == code, (
        f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


@pytest.fixture
def standalone(team_airflow: TeamAirflow, tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """The team's environment and scratch folder; ``airflow standalone`` and the Connect server it
    starts are stopped afterwards."""
    env = _team_env(team_airflow.venv, tmp_path)
    for folder in ("airflow", "dags", "specs", "state"):
        (tmp_path / folder).mkdir()
    yield env, tmp_path
    pid = pid_alive(tmp_path / "standalone.pid")
    stop_pid(tmp_path / "standalone.pid", "airflow standalone")
    if pid:  # LocalExecutor's task processes make process groups of their own: the whole session
        signal_all(session_members(pid), signal.SIGKILL)
    subprocess.run(["reprocess", "spark-connect", "stop"], env=env, cwd=tmp_path, capture_output=True)


def test_a_new_users_first_backfill_from_the_readme_commits_equal_to_the_oracle(
    team_airflow: TeamAirflow, standalone: tuple[dict[str, str], Path], kafka_config: dict[str, Any]
) -> None:
    env, work = standalone
    transcript = Transcript(before=team_airflow.wheel_seconds + team_airflow.seconds)
    would = [line for line in team_airflow.dry_run.splitlines() if line.startswith("Would install ")]
    transcript.lines += [
        f"{team_airflow.wheel_seconds:7.1f} s  pip wheel (before the steps below, once for both releases)",
        f"{team_airflow.seconds:7.1f} s  a venv with apache-airflow[postgres]=={team_airflow.release}; "
        "pip install --dry-run, then pip install of the wheel (before the steps below)",
        *(f"{'':11}the dry run: {line}" for line in would),
    ]
    try:
        _first_backfill(env, work, kafka_config, transcript, transcript.started)
    finally:
        transcript.write(team_airflow.release)


def _first_backfill(
    env: dict[str, str], work: Path, kafka_config: dict[str, Any], transcript: Transcript, since: float
) -> None:
    # The DAG file (two lines) and the metadata DB with the connections in it, as the README adds them.
    (work / "dags" / "pipelines.py").write_text(
        "from reprocess.airflow.factory import dags_from_specs\n\nglobals().update(dags_from_specs())\n"
    )
    _run(env, work, "airflow", "db", "migrate")
    since = transcript.step("airflow db migrate", since)
    app = _fresh_database("readme_app")
    connect_port = free_port()
    _run(env, work, "airflow", "connections", "add", "reprocess_db", "--conn-type", "postgres",
         "--conn-host", str(app["host"]), "--conn-port", str(app["port"]), "--conn-schema", app["schema"],
         "--conn-login", str(app["login"]), "--conn-password", str(app["password"]))  # fmt: skip
    bootstrap = json.dumps({"bootstrap.servers": kafka_config["bootstrap.servers"]})
    _run(env, work, "airflow", "connections", "add", "kafka_default", "--conn-type", "kafka", "--conn-extra", bootstrap)
    _run(env, work, "airflow", "connections", "add", "spark_default", "--conn-type", "spark_connect",
         "--conn-host", "127.0.0.1", "--conn-port", str(connect_port))  # fmt: skip
    since = transcript.step("airflow connections add reprocess_db, kafka_default, spark_default", since)

    api_port = int(env["AIRFLOW__API__PORT"])
    log = work / "standalone.log"
    server = spawn(["airflow", "standalone"], log, work / "standalone.pid", env=env, cwd=work)
    _run(env, work, "reprocess", "spark-connect", "start")
    since = transcript.step("reprocess spark-connect start (airflow standalone starting meanwhile)", since)
    _run(env, work, "reprocess", "spark-connect", "status")  # exit 0: it runs and holds this library
    init = _run(env, work, "reprocess", "init")
    since = transcript.step("reprocess init", since)
    assert "spark" in init and "pool" in init, init

    # A spec of the team's own, in its own folder, on a topic with records (some malformed).
    topic = f"readme-orders-{os.getpid()}"
    spec = (REPO / "pipelines" / "orders.yaml").read_text()
    spec = spec.replace("name: orders", f"name: {PIPELINE}", 1).replace("topics: [orders]", f"topics: [{topic}]")
    spec = spec.replace("target_table: public.orders", f"target_table: public.{PIPELINE}")
    spec = spec.replace("consumer_group: reprocess-orders", f"consumer_group: {PIPELINE}")
    (work / "specs" / f"{PIPELINE}.yaml").write_text(spec)
    demo_data.create_topic(kafka_config, topic, 3)
    produced = demo_data.produce(kafka_config, topic, 3, demo_data.order_events(500, 3, seed=42))
    since = transcript.step(f"spec written, {len(produced.messages)} records produced", since)
    validated = _run(env, work, "reprocess", "validate")
    since = transcript.step("reprocess validate", since)
    assert "no problems" in validated or "warning" in validated, validated

    wait_for_port(api_port, 180, "airflow standalone", log, server)
    url = f"http://127.0.0.1:{api_port}"
    token = _admin_token(url, Path(env["AIRFLOW_HOME"]), log)
    dag_id = f"reprocess_{PIPELINE}_backfill"
    _wait(lambda: airflow_http.get(url, f"/api/v2/dags/{dag_id}", token)[0] == 200, 180, f"{dag_id} parsed", log)
    since = transcript.step("airflow standalone up, the DAGs parsed", since)
    _call(url, token, "PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    run = _call(url, token, "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {}})
    run_path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"
    _wait(lambda: _run_state(url, token, run_path) in ("success", "failed"), RUN_TIMEOUT_S, "the run", log)
    finished = _call(url, token, "GET", run_path)
    since = transcript.step(f"backfill triggered over the REST API, ended {finished['state']}", since)
    assert finished["state"] == "success", finished
    assert "committed" in (finished.get("note") or ""), finished

    expected = {k: (s, str(Decimal(a).normalize()), p, o) for k, (s, a, p, o) in oracle.expected_rows(produced).items()}
    assert _target(app) == expected
    status = json.loads(_run(env, work, "reprocess", "status", PIPELINE, "--json"))
    transcript.step("reprocess status (the stored connections)", since)
    assert status[0]["name"] == PIPELINE, status
    assert "committed" in json.dumps(status), status


def _admin_token(url: str, home: Path, log: Path) -> str:
    """The admin's JWT, with the password ``airflow standalone`` generated (and printed)."""
    passwords = home / "simple_auth_manager_passwords.json.generated"
    _wait(passwords.exists, 60, "the generated admin password", log)
    return airflow_http.token(url, "admin", json.loads(passwords.read_text())["admin"])


def _call(url: str, token: str, method: str, path: str, payload: Any = None) -> Any:
    status, body, _ = airflow_http.response(url, path, token, method, payload)
    assert status in (200, 201), (method, path, status, body[:1000])
    return json.loads(body)


def _run_state(url: str, token: str, run_path: str) -> str | None:
    """The DAG run's state; None while the API server is too busy to answer (a loaded CI machine)."""
    try:
        return str(_call(url, token, "GET", run_path)["state"])
    except OSError:  # a read timeout, a reset connection
        return None


def _wait(done: Any, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
            pytest.fail(f"{what}: not within {timeout:.0f} s; airflow standalone's log ends:\n{tail}")
        time.sleep(2)


def _target(app: dict[str, Any]) -> dict[str, tuple[str, str, int, int]]:
    """key → (status, amount, partition, offset) read with psycopg2 (no product code)."""
    conn = psycopg2.connect(host=app["host"], port=app["port"], user=app["login"], password=app["password"],
                            dbname=app["schema"])  # fmt: skip
    with conn, conn.cursor() as cur:
        cur.execute(f"SELECT order_id, status, amount, _kafka_partition, _kafka_offset FROM public.{PIPELINE}")
        rows = {r[0]: (r[1], str(r[2].normalize()), r[3], r[4]) for r in cur.fetchall()}
    conn.close()
    return rows
