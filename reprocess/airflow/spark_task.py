"""The Spark task of a DAG: one job function, launched the way the Spark connection says.

The ``spark_default`` connection's type picks the launcher when the task runs, with the
provider's own operators:

- ``spark_connect`` (``sc://host:port``, :class:`SparkConnectHook`): the task is a Spark
  Connect client (the provider's :class:`PySparkOperator`) and calls the job function with a
  remote session; the warm server does the work, nothing starts a JVM in the Airflow worker.
- ``spark`` (``local[*]``, ``spark://``, ``yarn``, ``k8s://``): :class:`SparkSubmitOperator`
  runs ``spark_apps/run_job.py``, which calls the same function with the driver's session.

Why one task that dispatches, and not two tasks behind a branch: the connection's type is known
only at run time (DAG files are parsed without connection lookups), and one task keeps the run's
graph, task ids, pool, retries and UI the same whatever the deployment; its log says which
launcher ran. A job is a ``module:function`` taking ``(spark, **kwargs)``; its arguments are
templated strings; its secrets (templated from connections) reach a spark-submit driver as
``REPROCESS_<NAME>`` environment variables, never on the command line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_pyspark import PySparkOperator
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Connection

from reprocess.airflow.faults import ConfigFaultMixin
from reprocess.airflow.hooks import SPARK_CONN_ID
from reprocess.airflow.lineage import RunLineageMixin
from reprocess.airflow.settings import spark_log_level
from reprocess.spark.conf import dependency_args, spark_conf
from reprocess.spark.connect import check_library, check_reachable, client_env, shared_session
from reprocess.spark.entry_points import RUN_JOB, app_path, resolve_job, secret_env
from reprocess.spark.submit_output import keeps_ivy_report, without_ivy_report

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def _connect_job(
    spark: SparkSession, *, job: str, args: Mapping[str, str], secrets: Mapping[str, str], url: str
) -> Any:
    """The PySparkOperator's callable: refuse a server holding other code, then run the job."""
    check_library(spark, url)
    return resolve_job(job)(spark, **args, **secrets)


class _IvyQuietSubmitHook(SparkSubmitHook):
    """The provider's spark-submit hook, its output read without Ivy's resolution report."""

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        super()._process_spark_submit_log(without_ivy_report(itr))


class _IvyQuietSubmitOperator(SparkSubmitOperator):
    """The provider's spark-submit operator with :class:`_IvyQuietSubmitHook`. The provider builds
    its hook from some thirty of the operator's fields; re-classing that hook reuses the build
    instead of copying it (the subclass adds no state)."""

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        hook.__class__ = _IvyQuietSubmitHook
        return hook


class SparkJobOperator(RunLineageMixin, ConfigFaultMixin, PySparkOperator):
    """Run ``job`` through Spark Connect or spark-submit, as the connection ``conn_id`` says.

    :param job: ``module:function`` called as ``function(spark, **args, **secrets)``.
    :param args: the job's arguments (templated), strings.
    :param secrets: the job's secret arguments (templated, e.g. ``{{ conn.x.get_uri() }}``).
    :param lineage_target: the run's table, for OpenLineage (:mod:`reprocess.airflow.lineage`).
    :param registry_conn: the Schema Registry connection the job reads, for its configuration
        faults (:mod:`reprocess.airflow.faults`).
    """

    template_fields = (*PySparkOperator.template_fields, "args", "secrets")

    def __init__(
        self,
        *,
        job: str,
        args: Mapping[str, str],
        secrets: Mapping[str, str],
        conn_id: str = SPARK_CONN_ID,
        name: str | None = None,
        lineage_target: str | None = None,
        registry_conn: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(python_callable=_connect_job, conn_id=conn_id, **kwargs)
        self.registry_conn = registry_conn
        self.job = job
        self.args = dict(args)
        self.secrets = dict(secrets)
        self.name = name or self.task_id
        self.lineage_target = lineage_target
        self._submit: SparkSubmitOperator | None = None

    def execute(self, context: Any) -> Any:
        conn_id = self.conn_id or SPARK_CONN_ID
        conn = Connection.get(conn_id)
        if conn.conn_type == SparkConnectHook.conn_type:
            url = SparkConnectHook(conn_id).get_connection_url()
            check_reachable(url)
            log.info("launcher: Spark Connect client of %s (connection %s)", url.split(";")[0], conn_id)
            self.op_kwargs = {"job": self.job, "args": self.args, "secrets": self.secrets, "url": url}
            with client_env():
                return super().execute(context)
        log.info("launcher: spark-submit to %s (connection %s)", conn.host, conn_id)
        application_args = [self.job]
        for key, value in self.args.items():
            application_args += [f"--{key.replace('_', '-')}", str(value)]
        deps = dependency_args()
        level = spark_log_level()
        submit = SparkSubmitOperator if keeps_ivy_report(level) else _IvyQuietSubmitOperator
        self._submit = submit(
            task_id=self.task_id,
            application=str(app_path(RUN_JOB)),
            conn_id=conn_id,
            name=self.name,
            application_args=application_args,
            # Spark's INFO lines stay out of the task log ([reprocess] spark_log_level); a driver on a
            # cluster node (deploy mode cluster) has no file of this package and keeps its own logging.
            conf=spark_conf(level=level, quiet=conn.extra_dejson.get("deploy-mode") != "cluster"),
            # Spark's Kafka source: the local jars, or its Maven coordinates on a cluster
            jars=deps.get("jars"),
            packages=deps.get("packages"),
            env_vars={secret_env(key): value for key, value in self.secrets.items()},
        )
        return self._submit.execute(context)

    def execute_callable(self) -> Any:
        """Over Spark Connect, attach to the server's shared session instead of the provider's
        new session per task (which it also releases when the task ends): a new session starts
        three Python daemons on the server and costs a small run ~15 s (docs/performance.md)."""
        with shared_session(self.op_kwargs["url"]) as spark:
            self.op_kwargs = {**self.op_kwargs, "spark": spark}
            return super(PySparkOperator, self).execute_callable()

    def on_kill(self) -> None:
        if self._submit is not None:
            self._submit.on_kill()
