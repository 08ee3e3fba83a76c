"""The run-note listener: a finished pipeline run's summary becomes its note in the Airflow UI.

Tasks cannot set a run note through the Execution API, so a DAG-run listener (it runs where
the run's state changes, with metadata DB access) copies the summary that the ``report``
task stored in ``reprocess.runs.summary`` into the note shown in the UI.

A failed run gets a note too, at whatever task it failed: the task-failure hook runs in the
worker, where the exception is, and records it on the run's row (kind, task, reason, fix; the
state kept, a retry may still succeed); when the run fails, the run is marked failed and the
note shows that error. A run starting while the ``spark`` pool is missing gets a note saying its
Spark task will wait in ``scheduled`` until ``reprocess init`` creates the pool: the task cannot
see pools (the Task SDK has no metadata DB access), and creating the pool lets the run go on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.listeners import hookimpl

from reprocess.core.names import is_product_dag, kind_of_dag

log = logging.getLogger(__name__)
NOTE_LIMIT = 1000  # the UI/API limit of a run note
ERROR_XCOM = "reprocess_error"  # a failed task's error, for the note of a run that has no row


class RunNoteListener:
    @hookimpl
    def on_dag_run_running(self, dag_run: Any, msg: str | None) -> None:
        if _noted(dag_run.dag_id):
            _note_missing_pool(dag_run)

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str | None) -> None:
        _write_note(dag_run, failed=False)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str | None) -> None:
        _write_note(dag_run, failed=True)

    @hookimpl
    def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
        if _noted(task_instance.dag_id) and isinstance(error, BaseException):
            _record_error(task_instance, error)


def _noted(dag_id: str) -> bool:
    return is_product_dag(dag_id) and kind_of_dag(dag_id) != "reconcile"


def _record_error(task_instance: Any, error: BaseException) -> None:
    """In the worker: the attempt's error on the run's row, for the note of a run that then fails;
    and as the task's XCom ``reprocess_error``, for a run that failed before it had a row (its
    planning could not reach Kafka, say) or whose worker could not reach the app database."""
    from reprocess.operations.summary import failure_text

    said = failure_text(task_instance.task_id, error)
    try:
        task_instance.xcom_push(key=ERROR_XCOM, value=said)
    except Exception:  # the task failed already: recording why must not hide that
        log.exception("could not push the error of %s %s", task_instance.dag_id, task_instance.task_id)
    try:
        from reprocess.airflow.hooks import AppDatabaseHook
        from reprocess.core.names import run_key
        from reprocess.postgres.store import record_error

        engine = AppDatabaseHook().engine()
        with engine.begin() as conn:
            record_error(conn, run_key(task_instance.dag_id, task_instance.run_id), said)
        engine.dispose()
    except Exception:  # the task failed already: recording why must not hide that
        log.exception("could not record the error of %s %s", task_instance.dag_id, task_instance.task_id)


def _write_note(dag_run: Any, *, failed: bool) -> None:
    dag_id, run_id = dag_run.dag_id, dag_run.run_id  # read while the run is surely attached
    if not _noted(dag_id):
        return
    if kind_of_dag(dag_id) == "audit":
        _write_audit_note(dag_run, failed=failed)
        return
    try:
        from reprocess.operations.summary import format_note

        try:
            row = _finished_row(dag_run, failed=failed)
        except Exception:  # the app database out of reach (the run's own fault, say): the pushed error
            if not failed:
                raise
            log.exception("could not read the run of %s %s from the app database", dag_id, run_id)
            row = None
        if row is not None:
            _set_note(dag_run, format_note(*row)[:NOTE_LIMIT])
        elif failed:  # failed before the run had a row (planning could not reach Kafka, say)
            said = _pushed_error(dag_run) or _failed_tasks_text(dag_run)
            _set_note(dag_run, f"reprocess run failed: {said}"[:NOTE_LIMIT])
    except Exception:  # a note must never fail a run
        log.exception("could not write the run note of %s %s", dag_id, run_id)


def _write_audit_note(dag_run: Any, *, failed: bool) -> None:
    """An audit run's note: its verdict (reprocess.audits, the audit's id is the run's key), or why it could
    not run."""
    try:
        from sqlalchemy import text

        from reprocess.core.names import pipeline_of_dag, run_key
        from reprocess.operations.audit import last_audit_text

        key = run_key(dag_run.dag_id, dag_run.run_id)
        engine = _app_engine()
        try:
            with engine.connect() as conn:
                row = conn.execute(
                    text("SELECT audit_id, verdict, counts, heal_run, extract(epoch FROM now() - audited_at) AS age_s "
                         "FROM reprocess.audits WHERE audit_id = :a"), {"a": key}
                ).mappings().one_or_none()  # fmt: skip
        finally:
            engine.dispose()
        if row is not None:
            _set_note(dag_run, last_audit_text(pipeline_of_dag(dag_run.dag_id) or "", row)[:NOTE_LIMIT])
        elif failed:
            said = _pushed_error(dag_run) or _failed_tasks_text(dag_run)
            _set_note(dag_run, f"audit could not run: {said}"[:NOTE_LIMIT])
    except Exception:  # a note must never fail a run
        log.exception("could not write the audit note of %s %s", dag_run.dag_id, dag_run.run_id)


def _finished_row(dag_run: Any, *, failed: bool) -> tuple[Any, str, str | None] | None:
    """The run's ``(summary, state, error)`` from the app database (None: it has no row); a run the
    DAG failed is marked failed there, not left planned or staged."""
    from sqlalchemy import text

    from reprocess.core.names import run_key
    from reprocess.postgres.store import mark_failed

    key = run_key(dag_run.dag_id, dag_run.run_id)
    engine = _app_engine()
    try:
        with engine.begin() as conn:
            row = conn.execute(
                text("SELECT summary, state, error FROM reprocess.runs WHERE run_id = :r"), {"r": key}
            ).one_or_none()
            if row is None:
                return None
            summary, state, error = row.summary, row.state, row.error
            if failed and state != "committed":
                state, error = "failed", error or _failed_tasks_text(dag_run)
                mark_failed(conn, key, error)
            return summary, state, error
    finally:
        engine.dispose()


def _pushed_error(dag_run: Any) -> str | None:
    """The newest error a task of the run pushed (:func:`_record_error`), if any."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    with _session_of(dag_run) as session:
        pushed = session.scalar(
            select(XComModel)
            .where(XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id, XComModel.key == ERROR_XCOM)
            .order_by(XComModel.timestamp.desc())
            .limit(1)
        )
        return None if pushed is None else str(XComModel.deserialize_value(pushed))


def _failed_tasks_text(dag_run: Any) -> str:
    """What the note says when the worker recorded no error (the app database was out of its reach)."""
    with _session_of(dag_run) as session:
        failed = dag_run.get_task_instances(state=["failed", "upstream_failed"], session=session)
    tasks = ", ".join(ti.task_id for ti in failed)
    return (
        f"failed at {tasks or 'a task'} with no error recorded in the app database (reprocess_db unreachable "
        "from the worker?); fix: read the failed task's log, fix the cause, then clear the task"
    )


def _note_missing_pool(dag_run: Any) -> None:
    """A run whose Spark task would wait on a pool that does not exist says so, naming the fix."""
    dag_id, run_id = dag_run.dag_id, dag_run.run_id
    try:
        from airflow.models.pool import Pool

        from reprocess.airflow.common import SPARK_POOL

        with _session_of(dag_run) as session:
            waiting = [ti.task_id for ti in dag_run.get_task_instances(session=session) if ti.pool == SPARK_POOL]
            missing = bool(waiting) and Pool.get_pool(SPARK_POOL, session=session) is None
        if missing:
            _set_note(dag_run, (
                f"waiting: the Airflow pool `{SPARK_POOL}` does not exist, so {', '.join(waiting)} stays in "
                f"`scheduled` (the scheduler log says \"non-existent pool\"). SettingError: fix: run `reprocess "
                "init` (it creates the pool); the run then goes on by itself"
            ))  # fmt: skip
    except Exception:  # a note must never fail a run
        log.exception("could not check the pool of %s %s", dag_id, run_id)


def _app_engine() -> Any:
    """The app database's engine, its connection looked up on a thread of its own. Airflow's ORM
    session is per thread, and in the scheduler's loop the scheduler's session refuses a commit;
    the lookup in the metadata DB opens and commits a session, which on the scheduler's thread is
    that one, so ``reprocess_db`` "isn't defined" there (found by test_readme_install.py, whose
    connections live in the metadata DB only)."""
    from concurrent.futures import ThreadPoolExecutor

    from reprocess.airflow.hooks import AppDatabaseHook

    with ThreadPoolExecutor(max_workers=1) as lookup:
        return lookup.submit(AppDatabaseHook.server_engine).result()


@contextmanager
def _session_of(dag_run: Any) -> Iterator[Any]:
    """The scheduler's session the run is attached to, never committed here: the scheduler holds
    its locks in it and refuses a commit inside its loop ("UNEXPECTED COMMIT - THIS WILL BREAK HA
    LOCKS!", found by tests/integration/install/test_readme_install.py on a running scheduler). A detached
    run (``dag.test()``) gets a short session of its own."""
    from sqlalchemy.orm import object_session

    attached = object_session(dag_run)
    if attached is not None:
        yield attached
        return
    from airflow.utils.session import create_session

    with create_session() as session:
        yield session


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
