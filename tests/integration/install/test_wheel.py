"""The package as users install it: a built wheel in a scratch venv migrates, yields the DAGs, and
registers itself in an Airflow that has no plugins folder of ours.

The wheel is built and installed into a fresh venv by :mod:`devstack.wheel` (dependencies from
the project venv; the project's editable install and its entry points are not there). Everything
then runs with that venv's Python from a folder outside the repository, so nothing can be
imported from the checkout: the DAG file is the two lines a user writes, the plugin and the
provider come from the wheel's entry points, and that venv's ``airflow api-server`` serves the
Coverage page.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

import devstack.wheel
from reprocess.core.names import DAG_KINDS
from reprocess.spark.connect import library_files, library_fingerprint
from tests.support import airflow_http
from tests.support.helpers import REPO_ROOT

pytestmark = pytest.mark.integration("postgres")

# Runs inside the scratch venv; prints one JSON line with what it found.
PROBE = """
import json, os, sys
from pathlib import Path
import reprocess
from reprocess.spark.entry_points import RUN_JOB, app_path, resolve_job
from reprocess.postgres.db import make_engine, migrate
from airflow.dag_processing.dagbag import DagBag

engine = make_engine(os.environ["WHEEL_DB_URL"])
bag = DagBag(dag_folder=sys.argv[1])
task = bag.dags["reprocess_orders_backfill"].get_task("spark_read_stage")
print(json.dumps({
    "package": reprocess.__file__,
    "applied": migrate(engine),
    "applied_again": migrate(engine),
    "app": app_path(RUN_JOB).as_posix(),
    "job": sys.modules[resolve_job(task.job).__module__].__file__,
    "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
}))
"""


# The DAG file a user writes (docs/getting-started/install.md, "The DAG file"), pointed at a folder of specs.
USER_DAG_FILE = """from reprocess.airflow.factory import dags_from_specs
globals().update(dags_from_specs())
"""


# plugins/reprocess_plugin.py as the repository had it before the entry point registered the plugin.
OLD_SHIM = "from reprocess.airflow.plugin import ReprocessPlugin\n\n__all__ = ['ReprocessPlugin']\n"


# The Spark Connect library check's view of the installed package: its fingerprint and the names it hashes.
FINGERPRINT = """
import json
from reprocess.spark.connect import library_files, library_fingerprint
print(json.dumps({"fingerprint": library_fingerprint(), "files": sorted(library_files())}))
"""


# Runs inside the scratch venv: the JSON decoder's UDF on a Spark Connect session of its own, from the
# jar inside the installed package; prints the jar's path and what the UDF read.
DECODE = """
import json, sys, uuid
from pyspark.sql import SparkSession
from reprocess.formats.specs import parse_spec
from reprocess.formats import json_udf
from reprocess.formats.json.decode import schema_of

spec = parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text", "n": "numeric"}})
lay = json_udf.layout(spec, schema_of(["id", "n"]))
spark = SparkSession.builder.remote(sys.argv[1] + "/;session_id=" + str(uuid.uuid4())).getOrCreate()
rows = spark.createDataFrame([(b'{"id": "a", "n": 1.50}',), (b'{"id": "b", "id": "c"}',)], "value binary")
got = rows.selectExpr(json_udf.call_sql(spark, lay, "value") + " AS j").selectExpr("j.id", "j.n", "j._err").collect()
print(json.dumps({"jar": str(json_udf.jar_path()), "rows": [list(r) for r in got]}))
"""


def _fresh_database(name: str) -> str:
    import psycopg2

    url = os.environ["AIRFLOW_CONN_REPROCESS_DB"]
    conn = psycopg2.connect(url.rsplit("/", 1)[0] + "/postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return url.rsplit("/", 1)[0] + "/" + name


def test_wheel_carries_migrations_and_entry_point_and_the_dag_file_runs_from_it(tmp_path):
    wheel = devstack.wheel.build(tmp_path / "dist")
    members = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(Path(m).stem for m in members if m.startswith("reprocess/sql/") and m.endswith(".sql"))
    # The top-level sql/, spark_apps/ and plugins/ land inside the package; every library folder ships.
    assert shipped == sorted(p.stem for p in (REPO_ROOT / "sql").glob("[0-9][0-9][0-9]_*.sql"))
    assert "reprocess/spark_apps/run_job.py" in members
    folders = {p.parent.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "reprocess").rglob("__init__.py")}
    assert {f + "/__init__.py" for f in folders} <= set(members), sorted(folders)
    assert "reprocess/plugins/plugin.py" in members
    assert "reprocess/plugins/templates/pipeline.html" in members
    assert "reprocess/plugins/static/coverage.js" in members
    assert "reprocess/core/spec.schema.json" in members
    # The JSON decoder's UDF, compiled into the package by the build backend (build_backend/json_jar.py).
    assert "reprocess/jvm/reprocess-json.jar" in members
    # The dev stack is a distribution of its own (devstack/pyproject.toml): nothing of it in a user's install.
    assert not [m for m in members if m.startswith("devstack/")], members
    entry_points = next(m for m in members if m.endswith(".dist-info/entry_points.txt"))
    assert "reprocess.commands" not in zipfile.ZipFile(wheel).read(entry_points).decode()

    python = devstack.wheel.install_env(tmp_path / "venv", wheel)
    dags = tmp_path / "dags"
    shutil.copytree(REPO_ROOT / "dags", dags, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {
        "WHEEL_DB_URL": _fresh_database("reprocess_wheel_test"),
        "REPROCESS_PIPELINES_DIR": str(REPO_ROOT / "pipelines"),
    }
    probe = subprocess.run([str(python), "-c", PROBE, str(dags)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr[-4000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])

    installed = python.parent.parent
    assert Path(found["package"]).is_relative_to(installed), found["package"]
    assert found["applied"] == shipped and found["applied_again"] == []
    assert found["import_errors"] == {}
    assert Path(found["app"]).is_relative_to(installed) and Path(found["job"]).is_relative_to(installed)
    # The Spark Connect server's library check: the wheel's code is the checkout's, so its fingerprint is
    # too (the checkout maps spark_apps/, sql/ and plugins/ into the package; the wheel holds them inside).
    hashed = subprocess.run([python, "-c", FINGERPRINT], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert hashed.returncode == 0, hashed.stderr[-2000:]
    wheel_hashed = json.loads(hashed.stdout.strip().splitlines()[-1])
    checkout_files = sorted(library_files())
    assert wheel_hashed["files"] == checkout_files, set(wheel_hashed["files"]) ^ set(checkout_files)
    assert "reprocess.spark_apps/run_job.py" in checkout_files and "reprocess.core/spec.schema.json" in checkout_files
    assert wheel_hashed["fingerprint"] == library_fingerprint()
    # The entry point runs as spark-submit runs it: as a script, from the installed folder.
    usage = subprocess.run([str(python), found["app"]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "usage: run_job.py module:function" in usage.stderr, usage.stderr

    # The console script: every command listed, the dev stack's demo and produce not (a checkout's own);
    # validate finds the schema inside the installed package.
    command = str(python.parent / "reprocess")
    helped = subprocess.run([command, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert helped.returncode == 0 and "usage: reprocess" in helped.stdout, helped.stdout + helped.stderr
    assert all(c in helped.stdout for c in ("status", "reset", "redrive", "validate")), helped.stdout
    assert not {"demo", "produce"} & set(helped.stdout.split()), helped.stdout
    stack = subprocess.run([str(python), "-c", "import devstack"], cwd=tmp_path, env=env, capture_output=True)
    assert stack.returncode != 0, "the wheel's venv imports devstack"
    validated = subprocess.run([command, "validate", "--offline", str(REPO_ROOT / "pipelines")], cwd=tmp_path,
                               env=env, capture_output=True, text=True)  # fmt: skip
    specs = len(list((REPO_ROOT / "pipelines").glob("*.yaml")))
    assert validated.returncode == 0 and f"{specs} valid spec(s); no problems" in validated.stdout, validated.stdout
    # No folder of its own: with no setting, the command names the one to set (exit 3), then reads it.
    unset = {k: v for k, v in env.items() if k not in ("REPROCESS_PIPELINES_DIR", "AIRFLOW__REPROCESS__PIPELINES_DIR")}
    for extra, code, said in (
        ({}, 3, "set Airflow's [reprocess] pipelines_dir"),
        ({"AIRFLOW__REPROCESS__PIPELINES_DIR": str(REPO_ROOT / "pipelines")}, 0, f"{specs} valid spec(s)"),
    ):
        done = subprocess.run([command, "validate", "--offline"], cwd=tmp_path, env=unset | extra,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == code and said in done.stdout + done.stderr, done.stdout + done.stderr

    _the_decoders_udf_runs_from_the_installed_jar(tmp_path, python, env)
    _airflow_serves_the_installed_plugin(tmp_path, python, env)


def _the_decoders_udf_runs_from_the_installed_jar(tmp_path: Path, python: Path, env: dict[str, str]) -> None:
    """The wheel's jar, found inside the installed package, reaches the Connect server's executors as
    a session artifact (the dev stack's server has no jar of ours on its classpath): the UDF reads
    the fields and refuses a duplicate key."""
    url = f"sc://127.0.0.1:{os.environ['REPROCESS_CONNECT_PORT']}"
    done = subprocess.run([str(python), "-c", DECODE, url], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(found["jar"]).is_relative_to(python.parent.parent), found["jar"]
    assert found["rows"] == [["a", "1.5", None], [None, None, "dup"]], found["rows"]


def _airflow_serves_the_installed_plugin(tmp_path: Path, python: Path, env: dict[str, str]) -> None:
    """That venv's api-server, with an empty plugins folder and a two-line DAG file over a copy of
    the specs, serves the Coverage page and its API to a logged-in user only, lists the provider
    and the plugin once, and shows the DAGs of the specs."""
    home, plugins, dags, specs = (tmp_path / d for d in ("airflow_home", "plugins", "user_dags", "specs"))
    for folder in (home, plugins, dags):
        folder.mkdir()
    shutil.copytree(REPO_ROOT / "pipelines", specs)
    # A typo in one spec: its own placeholder DAG, every other pipeline's DAGs still there.
    (specs / "typo.yaml").write_text("name: typo\ntopics: [t]\nkey: [id]\ncolumns:\n  id: {type: money}\n")
    (dags / "pipelines.py").write_text(USER_DAG_FILE)
    airflow_env = {k: v for k, v in env.items() if not k.startswith("AIRFLOW__") and k != "REPROCESS_PIPELINES_DIR"}
    airflow_env |= {
        "PATH": f"{python.parent}{os.pathsep}{env['PATH']}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _fresh_database("airflow_wheel_test").replace(
            "postgresql://", "postgresql+psycopg2://", 1
        ),
        "AIRFLOW_CONN_REPROCESS_DB": env["WHEEL_DB_URL"],
        "AIRFLOW__REPROCESS__PIPELINES_DIR": str(specs),
    }
    for args in (["db", "migrate"], ["dags", "reserialize"]):
        done = subprocess.run([str(python), "-m", "airflow", *args], cwd=tmp_path, env=airflow_env,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    with airflow_http.api_server(python, airflow_env, tmp_path) as (url, admin):

        def api(path: str) -> Any:
            status, body = airflow_http.get(url, path, admin)
            assert status == 200, (path, status, body[:500])
            return json.loads(body)

        plugins_found = [p for p in api("/api/v2/plugins")["plugins"] if p["name"] == "reprocess"]
        assert len(plugins_found) == 1, plugins_found
        assert plugins_found[0]["source"].startswith("reprocess=="), plugins_found[0]
        assert {v["name"] for v in plugins_found[0]["external_views"]} == {"Coverage"}
        assert api("/api/v2/plugins/importErrors")["import_errors"] == []
        # Without the plugin the UI's catch-all would answer these paths (200, the app's HTML).
        for path in ("/reprocess/", "/reprocess/api/pipelines", "/reprocess/static/coverage.js"):
            # A page sends a logged-out browser to the login page; the API and files answer 401.
            assert airflow_http.get(url, path)[0] == (303 if path == "/reprocess/" else 401), path
            assert airflow_http.get(url, path, "not.a.jwt")[0] in (401, 403), path
            status, body = airflow_http.get(url, path, admin)
            assert status == 200, (path, status, body[:500])
        assert b"<title>Reprocess coverage</title>" in airflow_http.get(url, "/reprocess/", admin)[1]
        assert json.loads(airflow_http.get(url, "/reprocess/api/pipelines", admin)[1]) == []

        providers = {p["package_name"]: p for p in api("/api/v2/providers")["providers"]}
        assert providers["reprocess"]["version"] == "0.1.0", providers.get("reprocess")
        dag_ids = {d["dag_id"] for d in api("/api/v2/dags?limit=100")["dags"]}
        expected = {f"reprocess_{p.stem}_{k}" for p in (REPO_ROOT / "pipelines").glob("*.yaml")
                    for k in (*DAG_KINDS, "reset")}  # fmt: skip
        assert dag_ids == expected | {"reprocess_typo_broken", "reprocess_lag"}
        assert api("/api/v2/importErrors")["import_errors"] == []
        broken = api("/api/v2/dags/reprocess_typo_broken/details")
        assert broken["is_paused"] and "field 'columns.id.type': 'money' is not one of" in broken["doc_md"], broken

    # A plugins folder still holding the shim older checkouts shipped: one plugin, not two.
    (plugins / "reprocess_plugin.py").write_text(OLD_SHIM)
    listed = subprocess.run([str(python), "-m", "airflow", "plugins", "--output", "json"], cwd=tmp_path,
                            env=airflow_env, capture_output=True, text=True)  # fmt: skip
    assert listed.returncode == 0, listed.stderr[-3000:]
    names = [p["name"] for p in json.loads(listed.stdout[listed.stdout.index("[") :])]
    assert names.count("reprocess") == 1, names
