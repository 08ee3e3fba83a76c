"""What every pipeline DAG shares: the connection ids, retry policy and default args, the app
database and Kafka config from Airflow connections, the Spark task, and the form's pickers."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, Final

from airflow.sdk import ExceptionRetryPolicy, Param, RetryAction, RetryRule

from reprocess.airflow.hooks import (
    SPARK_CONN_ID,
    AppDatabaseHook,
    KafkaConfigHook,
    SchemaRegistryHook,
    spark_connect_url,
)
from reprocess.airflow.spark_task import SparkJobOperator
from reprocess.core.errors import (
    ConnectionConfigError,
    DataLossError,
    FencedRunError,
    ReconciliationGap,
    RunStateError,
    SpecError,
    StageRefusedError,
    StalePlanError,
    WindowNotStable,
)
from reprocess.core.spec import PipelineSpec

log = logging.getLogger(__name__)

SPARK_POOL: Final = "spark"
# Two runs at once on one Connect server gave 1.3x one run's records/s, four no more than two while
# each run took 2.7x as long (docs/performance.md): more runs queue in Airflow instead.
SPARK_POOL_SLOTS: Final = 2
SPARK_POOL_DESCRIPTION: Final = "Spark jobs of the reprocessing pipelines"
SAMPLE_PER_PARTITION: Final = 100  # records the dry run decodes per partition (reprocess validate's default)

# Validation, connection, fencing and refusal errors fail at once: retrying cannot change the
# answer, and a retry's own error ("run is failed, not staged") would only hide the cause.
RETRY_POLICY: Final = ExceptionRetryPolicy(
    rules=[
        RetryRule(exception=StageRefusedError, action=RetryAction.FAIL, reason="the commit refused the stage"),
        RetryRule(exception=StalePlanError, action=RetryAction.FAIL, reason="the plan is stale"),
        RetryRule(
            exception=RunStateError, action=RetryAction.FAIL, reason="the run is not in the state the task needs"
        ),
        RetryRule(exception=SpecError, action=RetryAction.FAIL, reason="invalid request or spec"),
        RetryRule(exception=ConnectionConfigError, action=RetryAction.FAIL, reason="a connection needs setting"),
        RetryRule(exception=DataLossError, action=RetryAction.FAIL, reason="data loss needs a decision"),
        RetryRule(exception=FencedRunError, action=RetryAction.FAIL, reason="fenced by another run"),
        RetryRule(exception=ReconciliationGap, action=RetryAction.FAIL, reason="a gap needs a backfill, not a retry"),
        RetryRule(
            exception=WindowNotStable,
            action=RetryAction.FAIL,
            reason="the window waited for the incremental already (wait_for_incremental)",
        ),
    ]
)


def default_args(spec: PipelineSpec) -> dict[str, Any]:
    """Retries with backoff; validation, connection, fencing, refusal and data-loss errors are never retried."""
    return {
        "owner": spec.owner,
        "retries": 2,
        "retry_delay": timedelta(seconds=30),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(minutes=10),
        "retry_policy": RETRY_POLICY,
    }


def app_engine() -> Any:
    """The app database (connection ``reprocess_db``), migrated."""
    return AppDatabaseHook().engine()


def kafka_config() -> dict[str, Any]:
    """The Kafka client config from the ``kafka_default`` connection's extra."""
    return KafkaConfigHook().client_config()


def dry_run_findings(spec: PipelineSpec) -> list[Any]:
    """``reprocess validate``'s online findings for the dry run: topics, a sample decoded on the
    ``spark_default`` Connect server (a spark-submit connection gets a finding saying where to
    run the check instead), the target table. Each is logged; the problems go into the summary."""
    from reprocess.operations.findings import Severity
    from reprocess.operations.validate import validate_online
    from reprocess.spark.connect import checked_session
    from reprocess.spark.sample import decode_sample

    engine, kafka = app_engine(), kafka_config()
    url = spark_connect_url()
    if url is None:
        findings = validate_online(spec, kafka, engine, None, SAMPLE_PER_PARTITION)
    else:
        with checked_session(url) as spark:
            findings = validate_online(
                spec,
                kafka,
                engine,
                lambda s, records: decode_sample(spark, s, records, registry_config(s)),
                SAMPLE_PER_PARTITION,
            )
    for finding in findings:
        log.log(logging.INFO if finding.severity is Severity.OK else logging.WARNING, "validate %s", finding.render())
    return findings


def registry_conn(spec: PipelineSpec) -> str | None:
    """The Schema Registry connection an Avro pipeline's tasks read (None: the pipeline reads none)."""
    return spec.schema_registry if spec.needs_registry else None


def registry_config(spec: PipelineSpec) -> dict[str, Any] | None:
    """The Schema Registry client config of an Avro pipeline (its ``schema_registry`` connection)."""
    return SchemaRegistryHook(spec.schema_registry).client_config() if spec.needs_registry else None


def pipeline_spark_task(
    spec: PipelineSpec, task_id: str, doc_md: str, job: str, name: str, args: dict[str, str], **kwargs: Any
) -> SparkJobOperator:
    """A pipeline's Spark task: ``job`` gets the spec's file and the fingerprint of the spec this
    DAG was built from (the job refuses a file that changed since), ``args`` and the DB and Kafka
    connections as secrets, on the ``spark_default`` launcher and in the Spark pool; ``kwargs`` go to
    the operator."""
    return SparkJobOperator(
        task_id=task_id,
        doc_md=doc_md,
        job=job,
        conn_id=SPARK_CONN_ID,
        name=name,
        pool=SPARK_POOL,
        registry_conn=registry_conn(spec),
        args={"spec": spec.source_file, "fingerprint": spec.fingerprint, **args},
        secrets={
            "db_url": AppDatabaseHook.url_template(),
            "kafka_config": KafkaConfigHook.config_template(),
            **(
                {"registry_config": SchemaRegistryHook.config_template(spec.schema_registry)}
                if spec.needs_registry
                else {}
            ),
        },
        **kwargs,
    )


def topic_partition_params(
    spec: PipelineSpec, section: str, topics_help: str, partitions_help: str
) -> dict[str, Param]:
    """The topic and partition pickers shared by the backfill and reset forms."""
    return {
        "topics": Param(
            list(spec.topics),
            type="array",
            items={"type": "string", "enum": list(spec.topics)},
            title="Topics",
            description=topics_help,
            section=section,
        ),
        "partitions": Param(
            [],
            type="array",
            items={"type": "integer", "minimum": 0},
            title="Partitions",
            description=partitions_help,
            section=section,
        ),
    }


def epoch() -> Any:
    """The start date of the scheduled DAGs (a fixed past date; catchup is off)."""
    from datetime import UTC, datetime

    return datetime(2026, 1, 1, tzinfo=UTC)
