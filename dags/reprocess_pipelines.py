"""Reprocessing DAGs (airflow), one set per pipeline spec in ``pipelines/*.yaml``.

Airflow only parses files that mention "airflow" and "dag", hence this docstring.
``REPROCESS_PIPELINES_DIR`` points at another folder of specs (the tests use it).
"""

from reprocess.airflow.factory import build_dags
from reprocess.core.spec import load_specs, pipelines_dir

globals().update(build_dags(load_specs(pipelines_dir())))
