"""The package as users install it: a built wheel in a scratch venv migrates and yields the DAGs.

The wheel is built from a copy of the sources (a stale ``build/`` could smuggle deleted files
into it) and installed with ``--no-deps`` into a fresh venv; the dependencies come from the
project venv through a ``.pth`` (a path entry only: the project's editable install of
``reprocess`` is not activated there). Everything then runs with the scratch venv's Python from
a folder outside the repository, so nothing can be imported from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.integration.helpers import REPO_ROOT

pytestmark = pytest.mark.integration("postgres")

# Runs inside the scratch venv; prints one JSON line with what it found.
PROBE = """
import json, os, sys
from pathlib import Path
import reprocess
from reprocess.apps import READ_STAGE, app_path
from reprocess.db import make_engine, migrate
from airflow.dag_processing.dagbag import DagBag

engine = make_engine(os.environ["WHEEL_DB_URL"])
bag = DagBag(dag_folder=sys.argv[1])
task = bag.dags["reprocess_orders_backfill"].get_task("spark_read_stage")
print(json.dumps({
    "package": reprocess.__file__,
    "applied": migrate(engine),
    "applied_again": migrate(engine),
    "app": app_path(READ_STAGE).as_posix(),
    "dag_app": task.application,
    "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
}))
"""


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "reprocess", src / "reprocess", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        check=True,
    )
    (wheel,) = out.glob("reprocess-*.whl")
    return wheel


def _scratch_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], check=True
    )
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    (site / "project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


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
    wheel = _build_wheel(tmp_path)
    members = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(Path(m).name.removesuffix(".sql") for m in members if m.startswith("reprocess/sql/"))
    assert shipped == sorted(p.stem for p in (REPO_ROOT / "reprocess" / "sql").glob("[0-9][0-9][0-9]_*.sql"))
    assert "reprocess/apps/read_stage.py" in members

    python = _scratch_venv(tmp_path, wheel)
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
    assert found["dag_app"] == found["app"] and Path(found["app"]).is_relative_to(installed)
    # The entry point runs as spark-submit runs it: as a script, from the installed folder.
    usage = subprocess.run([str(python), found["app"], "--help"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert usage.returncode == 0 and "--run-id" in usage.stdout, usage.stderr
