"""Reprocessing DAGs (airflow), one set per pipeline spec in ``pipelines/*.yaml``.

Airflow only parses files that mention "airflow" and "dag", hence this docstring.
``REPROCESS_PIPELINES_DIR`` points at another folder of specs (the tests use it).
"""

import os
from pathlib import Path

from reprocess.dagfactory import build_dags
from reprocess.spec import load_specs

PIPELINES_DIR = Path(os.environ.get("REPROCESS_PIPELINES_DIR") or Path(__file__).resolve().parent.parent / "pipelines")

globals().update(build_dags(load_specs(PIPELINES_DIR)))
