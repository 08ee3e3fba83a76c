"""The package as users install it: a built wheel in a scratch venv migrates and yields the DAGs.

The wheel is built and installed into a fresh venv by :mod:`devstack.wheel` (dependencies from
the project venv; the project's editable install is not active there). Everything then runs
with that venv's Python from a folder outside the repository, so nothing can be imported from
the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

import devstack.wheel
from tests.integration.helpers import REPO_ROOT

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
    # The top-level sql/ and spark_apps/ land inside the package; every library folder ships.
    assert shipped == sorted(p.stem for p in (REPO_ROOT / "sql").glob("[0-9][0-9][0-9]_*.sql"))
    assert "reprocess/spark_apps/run_job.py" in members
    folders = {p.parent.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "reprocess").rglob("__init__.py")}
    assert {f + "/__init__.py" for f in folders} <= set(members), sorted(folders)
    assert "reprocess/airflow/web/templates/pipeline.html" in members
    assert "reprocess/airflow/web/static/coverage.js" in members

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
    # The entry point runs as spark-submit runs it: as a script, from the installed folder.
    usage = subprocess.run([str(python), found["app"]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "usage: run_job.py module:function" in usage.stderr, usage.stderr
