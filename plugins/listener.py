"""The run-note listener: a finished pipeline run's summary becomes its note in the Airflow UI.

Tasks cannot set a run note through the Execution API, so a DAG-run listener (it runs where
the run's state changes, with metadata DB access) copies the summary that the ``report``
task stored in ``reprocess.runs.summary`` into the note shown in the UI.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)
NOTE_LIMIT = 1000  # the UI/API limit of a run note


class RunNoteListener:
    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str | None) -> None:
        _write_note(dag_run)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str | None) -> None:
        _write_note(dag_run)


def _write_note(dag_run: Any) -> None:
    if not dag_run.dag_id.startswith("reprocess_") or dag_run.dag_id.endswith("_reconcile"):
        return
    try:
        from sqlalchemy import text

        from reprocess.airflow.hooks import AppDatabaseHook
        from reprocess.core.names import run_key
        from reprocess.operations.summary import format_note

        engine = AppDatabaseHook.server_engine()
        with engine.connect() as conn:
            row = conn.execute(
                text("SELECT summary, state, error FROM reprocess.runs WHERE run_id = :r"),
                {"r": run_key(dag_run.dag_id, dag_run.run_id)},
            ).one_or_none()
        engine.dispose()
        if row is not None:
            _set_note(dag_run, format_note(row.summary, row.state, row.error)[:NOTE_LIMIT])
    except Exception:  # a note must never fail a run
        log.exception("could not write the run note of %s %s", dag_run.dag_id, dag_run.run_id)


def _set_note(dag_run: Any, note: str) -> None:
    """In the scheduler the run is attached to its session: the note joins that transaction.

    ``dag.test()`` hands over a detached run; then a session of our own writes the note (it
    holds no lock on the run, so there is nothing to wait for).
    """
    from sqlalchemy import select
    from sqlalchemy.orm import object_session

    if object_session(dag_run) is not None:
        dag_run.note = note
        return
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        attached = session.scalar(
            select(DagRun).where(DagRun.dag_id == dag_run.dag_id, DagRun.run_id == dag_run.run_id)
        )
        if attached is not None:
            attached.note = note
