"""OpenLineage for a run's tasks: the topics read (with the offset ranges), the target table written
(with the rows written once the run committed) and, on failure, the product's error kind.

The OpenLineage provider is an optional extra (``reprocess[openlineage]``). Its listener calls
``get_openlineage_facets_on_complete`` / ``_on_failure`` of an operator that has them; without the
provider nothing calls them, and nothing here imports it: the facets are built in
:mod:`reprocess.airflow.lineage_facets`, imported only inside those methods.

Which tasks report: the Spark task (it reads the topics; a batched run commits its batches there)
and ``commit_transaction`` (the one task whose success means the rows are in the table and the
ledger moved). Each event is built from Postgres when it is emitted, so it states what is durably
true: the run's planned ranges, and ``outputStatistics.rowCount`` only once the run committed (a
Spark task's event before the commit would otherwise count rows that may never land). A failure in
either task names the exception's kind, the product's own (``reprocess.core.errors``) or not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk.bases.decorator import task_decorator_factory

from reprocess.airflow.faults import PipelinePythonOperator
from reprocess.airflow.lineage_facts import Failure, RunFacts
from reprocess.core.errors import ReprocessError
from reprocess.core.ranges import OffsetRange


def kafka_namespace(config: dict[str, Any]) -> str:
    """OpenLineage's Kafka namespace: the first bootstrap server.

    >>> kafka_namespace({"bootstrap.servers": "k1:9092,k2:9092"})
    'kafka://k1:9092'
    """
    first = str(config.get("bootstrap.servers", "")).split(",")[0].strip()
    return f"kafka://{first}"


def postgres_names(url: str, qualified_target: str) -> tuple[str, str]:
    """OpenLineage's Postgres namespace and table name (``database.schema.table``).

    >>> postgres_names("postgresql://u:p@db:5433/app", "public.orders")
    ('postgres://db:5433', 'app.public.orders')
    """
    parts = urlsplit(url)
    return f"postgres://{parts.hostname}:{parts.port or 5432}", f"{parts.path.lstrip('/')}.{qualified_target}"


def failure_of(task_id: str, error: BaseException) -> Failure:
    from reprocess.operations.summary import failure_text

    return Failure(type(error).__name__, isinstance(error, ReprocessError), failure_text(task_id, error))


def run_facts(task_instance: Any, qualified_target: str) -> RunFacts:
    """The run of the task instance's DAG run (``names.run_key``), from Postgres."""
    from reprocess.airflow.hooks import AppDatabaseHook, KafkaConfigHook
    from reprocess.core.names import run_key
    from reprocess.core.runs import RunState
    from reprocess.postgres import queries

    run_id = run_key(task_instance.dag_id, task_instance.run_id)
    engine = AppDatabaseHook().engine()
    try:
        with engine.begin() as conn:
            counts = conn.execute(queries.RUN_COUNTS, {"run_id": run_id}).one_or_none()
            ranges = tuple(
                OffsetRange(r.topic, r.partition, r.start_offset, r.end_offset)
                for r in conn.execute(queries.RUN_RANGES, {"run_id": run_id})
            )
    finally:
        engine.dispose()
    namespace, table = postgres_names(AppDatabaseHook().url(), qualified_target)
    return RunFacts(
        run_id=run_id,
        kafka_namespace=kafka_namespace(KafkaConfigHook().client_config()),
        postgres_namespace=namespace,
        table=table,
        ranges=ranges,
        committed=counts is not None and counts.state == RunState.COMMITTED,
        rows_upserted=(counts.rows_upserted or 0) if counts else 0,
        rows_deleted=(counts.rows_deleted or 0) if counts else 0,
        dead_letters=(counts.dead_letters or 0) if counts else 0,
        records_read=(counts.records_read or 0) if counts else 0,
    )


def _keeping_error(execute: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(execute)
    def wrapper(self: RunLineageMixin, *args: Any, **kwargs: Any) -> Any:
        try:
            return execute(self, *args, **kwargs)
        except BaseException as exc:
            self._lineage_error = exc
            raise

    wrapper._keeps_error = True  # type: ignore[attr-defined]
    return wrapper


class RunLineageMixin:
    """An operator's OpenLineage methods for a pipeline run's task (see the module); the operator
    sets ``lineage_target``, the spec's ``schema.table`` (None: a task of no run, no lineage)."""

    task_id: str
    lineage_target: str | None = None
    _lineage_error: BaseException | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each operator class's execute keeps its exception for the failure event: the provider
        hands ``get_openlineage_facets_on_failure`` the task instance, not the error."""
        super().__init_subclass__(**kwargs)
        execute = cls.execute  # type: ignore[attr-defined]
        if not getattr(execute, "_keeps_error", False):
            cls.execute = _keeping_error(execute)  # type: ignore[attr-defined]

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._lineage(task_instance, None)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        error = self._lineage_error
        return self._lineage(task_instance, failure_of(self.task_id, error) if error is not None else None)

    def _lineage(self, task_instance: Any, failure: Failure | None) -> Any:
        if self.lineage_target is None:
            return None
        from reprocess.airflow.lineage_facets import operator_lineage

        return operator_lineage(run_facts(task_instance, self.lineage_target), failure)


class RunLineagePythonOperator(RunLineageMixin, PipelinePythonOperator):
    """The ``@task`` operator with the run's lineage."""

    custom_operator_name = "@task"

    def __init__(self, *, lineage_target: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lineage_target = lineage_target


def lineage_task(**kwargs: Any) -> Callable[..., Any]:
    """``@task`` whose operator reports the run's lineage (``lineage_target=`` the spec's table)."""
    return task_decorator_factory(decorated_operator_class=RunLineagePythonOperator, **kwargs)
