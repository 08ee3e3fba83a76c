"""Airflow DAGs generated from pipeline specs: per spec a backfill, an incremental, a reconcile,
an audit and a reset DAG (``reprocess_<pipeline>_<kind>``), and per spec file that does not load a paused
``reprocess_<file>_broken`` DAG saying what is wrong. A user's DAG file is two lines::

    from reprocess.airflow.factory import dags_from_specs
    globals().update(dags_from_specs())  # [reprocess] pipelines_dir; or ("/opt/specs")

A broken spec is not an import error: Airflow 3 marks every DAG of a file that has an import
error stale (``_update_import_errors`` in ``airflow.dag_processing.collection``), even the DAGs
the file did define, so one typo would hide every pipeline of the folder.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from airflow.sdk import DAG, task

from reprocess.airflow.assets import PipelineAssets, locate
from reprocess.airflow.audit_dag import build_audit_dag
from reprocess.airflow.lag_dag import LAG_DAG_ID, build_lag_dag
from reprocess.airflow.reconcile_dag import build_reconcile_dag
from reprocess.airflow.reset_dag import build_reset_dag
from reprocess.airflow.run_dags import build_run_dag
from reprocess.airflow.settings import pipelines_dir
from reprocess.core.errors import SpecError
from reprocess.core.names import broken_spec_dag_id
from reprocess.core.runs import RunKind
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import PIPELINES_DIR_ENV, read_folder

log = logging.getLogger(__name__)


def dags_from_specs(folder: str | Path | None = None, *, relative_to: str | Path | None = None) -> dict[str, DAG]:
    """Every DAG of every ``*.yaml`` spec in ``folder``, by dag id, and a broken-spec DAG per file that
    does not load.

    Without ``folder``, the configured one (:func:`reprocess.airflow.settings.pipelines_dir`). A
    relative ``folder`` is resolved against the folder of the file ``relative_to`` (pass the DAG
    file's ``__file__``): the DAG processor's working directory is not the DAG file's.
    ``REPROCESS_PIPELINES_DIR``, when set, wins over ``folder``. A spec file that does not load
    costs its own pipeline's DAGs only: it becomes :func:`build_broken_spec_dag` and an error line
    in the DAG processor's log; ``reprocess validate`` reports every problem of a folder at once.
    """
    if folder is None:
        path = pipelines_dir()
    else:
        path = Path(folder)
        if relative_to is not None and not path.is_absolute():
            path = Path(relative_to).resolve().parent / path
        path = Path(os.environ.get(PIPELINES_DIR_ENV) or path)
    specs = read_folder(path)
    dags = build_dags(specs.specs)
    for source, error in specs.broken.items():
        dag = build_broken_spec_dag(source, error)
        dags[dag.dag_id] = dag
        log.error(
            "spec_file=%s does not load; its pipeline has only the DAG %s until fixed: %s", source, dag.dag_id, error
        )
    return dags


def build_dags(specs: list[PipelineSpec]) -> dict[str, DAG]:
    """Every DAG of every spec, by dag id, and the lag DAG of them all; the connections are read once for
    every spec's Assets."""
    dags = {}
    where = locate() if specs else None
    for spec in specs:
        assets = PipelineAssets.of(spec, where) if where is not None else None
        runs = (build_run_dag(spec, kind, assets) for kind in RunKind)
        for dag in (*runs, build_reconcile_dag(spec, assets), build_audit_dag(spec), build_reset_dag(spec)):
            dags[dag.dag_id] = dag
    if specs:
        dags[LAG_DAG_ID] = build_lag_dag(specs)
    return dags


def build_broken_spec_dag(source: Path, error: SpecError) -> DAG:
    """The DAG a spec file that does not load leaves in its pipeline's place: paused, manual, its doc
    the error and the fix; its one task fails with the error, for a run someone triggers anyway."""
    fix = (
        f"Fix the file as the error says; `reprocess validate {source}` lists every problem of it with its fix. "
        "Once it loads, the next parse replaces this DAG with the pipeline's DAGs."
    )
    dag = DAG(
        dag_id=broken_spec_dag_id(source.stem),
        description=f"broken spec {source.name}: its pipeline has no DAGs until it loads",
        doc_md=f"### Broken spec `{source}`\n\nThis spec file does not load, so its pipeline has no DAGs:\n\n"
        f"```\n{error}\n```\n\n{fix}\n",
        schedule=None,
        catchup=False,
        is_paused_upon_creation=True,
        tags=["reprocess", "broken spec"],
    )
    with dag:

        @task(task_id="spec_error", retries=0, doc_md="Fails with the spec file's error.")
        def spec_error() -> None:
            raise SpecError(f"{error}. {fix}")

        spec_error()
    return dag
