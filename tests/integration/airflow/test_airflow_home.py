"""A scratch Airflow home whose metadata DB holds the connections, none in the environment, as the
install page (docs/getting-started/install.md) has a team add them: the ``reprocess`` command finds
them as Airflow does, a Kafka connection that points nowhere is one line naming it (and a JSON error
with ``--json``), a Spark Connect one costs at most one of Airflow's RFC 3986 warnings per command,
and the plugin's pages send a logged-out browser to that Airflow's login while its API answers 401."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tests.support import airflow_http

REPO = Path(__file__).resolve().parents[3]
SPARK_PORT = 15999  # spark_default's port in the metadata DB: not the default 15002, so its answer shows it was read
# Airflow's models.Connection.get_uri() logs this on every metastore lookup of a connection whose type,
# like the Spark provider's `spark_connect`, holds an underscore.
SCHEME_WARNING = "Connection schemes (type: spark_connect) shall not contain '_'"


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory, engine: Any) -> dict[str, str]:
    """An Airflow home with a migrated SQLite metadata DB holding ``reprocess_db``, ``kafka_default``
    and ``spark_default`` (added by ``airflow connections add``), and one spec in a folder of its own."""
    home, specs = tmp_path_factory.mktemp("airflow_home"), tmp_path_factory.mktemp("specs")
    shutil.copy(REPO / "pipelines" / "orders.yaml", specs)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_CONN_", "AIRFLOW__DATABASE__"))}
    env.update(AIRFLOW_HOME=str(home), REPROCESS_PIPELINES_DIR=str(specs))
    db = urlsplit(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    kafka = {"bootstrap.servers": f"127.0.0.1:{os.environ['REPROCESS_KAFKA_PORT']}"}
    for args in (
        ["db", "migrate"],
        ["connections", "add", "reprocess_db", "--conn-type", "postgres", "--conn-host", str(db.hostname),
         "--conn-port", str(db.port), "--conn-schema", db.path.lstrip("/"), "--conn-login", str(db.username),
         "--conn-password", unquote(db.password or "")],
        ["connections", "add", "kafka_default", "--conn-type", "kafka", "--conn-extra", json.dumps(kafka)],
        ["connections", "add", "spark_default", "--conn-type", "spark_connect", "--conn-host", "127.0.0.1",
         "--conn-port", str(SPARK_PORT)],
    ):  # fmt: skip
        done = _run(env, sys.executable, "-m", "airflow", *args)
        assert done.returncode == 0, f"airflow {args[:2]}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return env


def test_status_answers_from_connections_stored_only_in_the_metadata_db(airflow_env: dict[str, str]) -> None:
    assert not [k for k in airflow_env if k.startswith("AIRFLOW_CONN_")]
    done = _run(airflow_env, "reprocess", "status", "--json")
    pipelines = json.loads(done.stdout)
    assert "orders" in {p["name"] for p in pipelines}
    # The database is the suite's: another test may have left the orders pipeline's newest run failed,
    # which status reports with exit 1; any other code is an error.
    failed = any(p.get("latest_state") == "failed" for p in pipelines)
    assert done.returncode == (1 if failed else 0), done.stderr[-3000:]


def test_a_wrong_kafka_port_is_one_line_naming_kafka_default_and_a_json_error(airflow_env: dict[str, str]) -> None:
    from devstack.process import free_port

    servers = f"127.0.0.1:{free_port()}"  # nothing listens there
    wrong = {"conn_type": "kafka", "extra": {"bootstrap.servers": servers}}
    env = {**airflow_env, "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(wrong)}  # the environment form wins over the DB's
    done = _run(env, "reprocess", "validate", "--json", str(Path(env["REPROCESS_PIPELINES_DIR"]) / "orders.yaml"))
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr[-3000:])
    error = json.loads(done.stdout)["error"]
    assert error["message"] == (
        f"`kafka_default` `bootstrap.servers={servers}`: {servers} connection refused; check the connection's extra"
    )
    assert error["kind"] == "ConnectionConfigError" and error["exit_code"] == 3
    assert "rdkafka" not in done.stderr and "Connection refused" not in done.stderr
    assert [line for line in done.stderr.splitlines() if "kafka_default" in line] == [
        f"reprocess validate: {error['message']}"
    ]


def test_a_spark_connect_connection_in_the_metadata_db_logs_airflows_scheme_warning_at_most_once_per_command(
    airflow_env: dict[str, str],
) -> None:
    done = _run(airflow_env, "reprocess", "spark-connect", "status", "--json")
    # Airflow's structlog writes its warnings to stdout, ahead of the JSON line.
    assert json.loads(done.stdout.splitlines()[-1])["url"] == f"sc://127.0.0.1:{SPARK_PORT}", done.stdout[-3000:]
    assert (done.stdout + done.stderr).count(SCHEME_WARNING) <= 1, done.stdout[-3000:]


def test_pages_redirect_a_logged_out_browser_to_login_and_the_api_answers_401(
    airflow_env: dict[str, str], tmp_path: Path
) -> None:
    with airflow_http.api_server(Path(sys.executable), airflow_env, tmp_path) as (url, admin):
        for page in ("/reprocess/", "/reprocess/pipelines/orders", "/reprocess/dag/reprocess_orders_backfill"):
            status, _, headers = airflow_http.response(url, page)
            assert status == 303, (page, status)
            login = urlsplit(headers["location"])
            assert login.path == "/auth/login" and parse_qs(login.query)["next"] == [f"{url}{page}"], headers
        for api in ("/reprocess/api/pipelines", "/reprocess/api/pipelines/orders/runs", "/reprocess/static/x.js"):
            assert airflow_http.get(url, api)[0] == 401, api
        # Logged in, the page reads reprocess_db from the metadata DB (the API server's own lookup).
        status, body = airflow_http.get(url, "/reprocess/", admin)
        assert status == 200 and b"<title>Reprocess coverage</title>" in body, (status, body[:500])
