"""The wheel installs into a team's Airflow without moving it: its requirements are ranges that the
previous Airflow 3.3 patch release satisfies, not the project's pins (constraints.txt).

A fresh venv gets ``apache-airflow[postgres]==3.<minor>.<patch - 1>`` resolved by pip alone, as a team
would have it (Airflow's own constraints file for that release is not reachable here: only the
package registries are), then the built wheel, with its dependencies. Every package of that Airflow
keeps its version (``pip freeze`` before and after); what the wheel adds is only new packages.
pip's cache keeps later runs off the network for the downloads (pyspark's 450 MB sdist is built once);
what is left is pip's resolution against the index and writing the 1.3 GB venv (pyspark's jars are
most of it): about 3 minutes on an idle machine, no bytecode compiled.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import devstack.wheel

# Needs the package registry (PyPI), no service of ours. Marked lane: it runs one at a time beside the
# parallel part (a venv build is disk and CPU, and would hold a worker for its whole length).
pytestmark = [pytest.mark.integration("pypi"), pytest.mark.lane]

PREVIOUS_AIRFLOW = "3.3.1"


def _pip(venv: Path, *args: str) -> str:
    """The project venv's pip acting on ``venv`` (which gets no pip of its own)."""
    cmd = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True)
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _versions(venv: Path) -> dict[str, str]:
    """name -> version of every distribution in ``venv`` (``pip freeze``'s, as JSON: a wheel installed
    from a file is ``name @ file://…`` in freeze's text)."""
    return {d["name"].lower(): d["version"] for d in json.loads(_pip(venv, "list", "--format=json"))}


def test_the_wheel_installs_beside_the_previous_airflow_patch_release_and_changes_none_of_its_packages(tmp_path):
    wheel = devstack.wheel.build(tmp_path / "dist")
    venv = tmp_path / "airflow"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    _pip(venv, "install", "-q", "--no-compile", f"apache-airflow[postgres]=={PREVIOUS_AIRFLOW}")
    before = _versions(venv)
    assert before["apache-airflow"] == PREVIOUS_AIRFLOW, before

    _pip(venv, "install", "-q", "--no-compile", str(wheel))
    after = _versions(venv)
    moved = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    assert moved == {}, f"installing the wheel changed packages of Airflow {PREVIOUS_AIRFLOW}: {moved}"
    added = set(after) - set(before)
    assert {"reprocess", "pyspark", "pyspark-client", "apache-airflow-providers-apache-spark"} <= added, added
    # pyspark and pyspark-client write the same files: one version (pyproject.toml pins both).
    assert after["pyspark"] == after["pyspark-client"], (after["pyspark"], after["pyspark-client"])
    assert not any(name.startswith("reprocess-devstack") for name in after), sorted(added)
    _pip(venv, "check")

    # The package imports against that Airflow: the DAG factory and the plugin, as Airflow loads them.
    probe = "import airflow, reprocess.airflow.factory, reprocess.plugins.plugin; print(airflow.__version__)"
    ran = subprocess.run([venv / "bin" / "python", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    said = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0 and ran.stdout.splitlines()[-1] == PREVIOUS_AIRFLOW, said
