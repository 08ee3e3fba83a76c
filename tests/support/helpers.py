"""Shared helpers for integration tests: per-test specs and Postgres read-backs."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, text

from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_spec
from tests.support import oracle

ORDERS_SPEC = Path(__file__).resolve().parents[2] / "pipelines" / "orders.yaml"
PAYMENTS_SPEC = ORDERS_SPEC.with_name("payments.yaml")
REPO_ROOT = ORDERS_SPEC.parents[1]


def orders_spec(name: str, topic: str, base: Path = ORDERS_SPEC, **overrides: Any) -> PipelineSpec:
    """A shipped spec on a test's own topic and target schema, written where the DAG file finds it."""
    raw = yaml.safe_load(base.read_text())
    table = f"{name}.{raw['name']}"
    raw.update({"name": name, "topics": [topic], "consumer_group": f"g-{name}", "target_table": table})
    raw.update(overrides)
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return read_spec(path)


def target_rows(engine: Engine, spec: PipelineSpec) -> dict[str, tuple[str, str, int, int]]:
    """key → (status, amount, partition, offset), comparable with oracle.expected_rows."""
    with engine.connect() as conn:
        result = conn.execute(
            text(f"SELECT order_id, status, amount, _kafka_partition, _kafka_offset FROM {spec.qualified_target}")
        )
        return {r[0]: (r[1], str(r[2].normalize()) if r[2] is not None else None, r[3], r[4]) for r in result}


def ledger(engine: Engine, spec: PipelineSpec) -> dict[int, int]:
    with engine.connect() as conn:
        return dict(
            conn.execute(
                text("SELECT partition, next_offset FROM reprocess.consumer_offsets WHERE pipeline = :p"),
                {"p": spec.name},
            ).all()
        )


def group_offsets(kafka: dict[str, Any], group: str, topic: str, partitions: int) -> dict[int, int]:
    """The consumer group's committed offsets, asked of the broker by a plain consumer of the group
    (it never joins it). Not the admin API's ListConsumerGroupOffsets: librdkafka 2.16 crashes the
    process when that answer carries an error, as after a broker restart (reprocess.kafka.clients.committed_offsets)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka["bootstrap.servers"], "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in committed}
    finally:
        consumer.close()


def dead_letter_count(engine: Engine, spec: PipelineSpec) -> int:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM reprocess.dead_letters WHERE pipeline = :p"), {"p": spec.name}
        ).scalar_one()


def runs(engine: Engine, spec: PipelineSpec) -> list[Any]:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT * FROM reprocess.runs WHERE pipeline = :p ORDER BY created_at"), {"p": spec.name}
        ).all()


def run_dag(spec: PipelineSpec, kind: str, conf: dict[str, Any] | None = None) -> Any:
    """Run a generated DAG with ``dag.test()``: the DAG folder is parsed anew, so it sees the spec."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert bag.import_errors == {}, bag.import_errors
    return bag.dags[spec.dag_id(kind)].test(run_conf=conf)


# A test's spark-submit job reads a few hundred records, so the C2 compiler's work (what the product
# runs with: its jobs read millions, reprocess.spark.conf) never pays back in it: with C1 alone a
# 600-record job's JVM used 10.1-10.6 s of CPU instead of 19.5-20.6 s, on the suite's two cores.
# The JIT tier changes how fast the same bytecode runs, not what it does.
TEST_DRIVER_JIT = "-XX:TieredStopAtLevel=1"
# The job the DAG's Spark task runs (spark_read_stage).
READ_JOB = "reprocess.runner.spark_run:read_job"


def start_spark_stage(
    spec: PipelineSpec,
    run_id: str,
    *,
    batch_size: int | None = None,
    kafka: dict[str, Any] | None = None,
    conf: dict[str, str] | None = None,
    master: str | None = None,
) -> Any:
    """spark-submit the run's read job as the DAG does, in its own process group (killable).

    ``kafka`` replaces the ``kafka_default`` connection's config (another broker); ``conf``
    adds Spark settings; ``master`` replaces local mode's (a cluster's URL). The driver JVM runs
    the product's settings plus :data:`TEST_DRIVER_JIT`.
    """
    import subprocess

    from reprocess.spark.conf import spark_conf, spark_submit_command
    from reprocess.spark.entry_points import RUN_JOB, app_path, secret_env

    kafka = kafka if kafka is not None else _kafka_from_env()
    secrets = {"db_url": os.environ["AIRFLOW_CONN_REPROCESS_DB"], "kafka_config": json.dumps(kafka)}
    env = {**os.environ, **{secret_env(name): value for name, value in secrets.items()}}
    java = f"{spark_conf()['spark.driver.extraJavaOptions']} {TEST_DRIVER_JIT}"
    conf = {"spark.driver.extraJavaOptions": java, **(conf or {})}
    args = (READ_JOB, "--spec", spec.source_file, "--run-id", run_id)
    cmd = spark_submit_command(app_path(RUN_JOB), *args, extra=conf, **({"master": master} if master else {}))
    if batch_size:
        cmd += ["--batch-size", str(batch_size)]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


@contextmanager
def connect_session(conf: dict[str, str] | None = None) -> Iterator[Any]:
    """A Spark Connect client of the test server (``make services``, restarted for this code), as
    the DAG's Connect launcher opens it: the server's shared session, the library checked first.

    ``conf`` (Spark settings for this test alone) gets a session of its own instead, released after:
    a setting made in the shared session would reach every later run. A new session costs its
    Python daemons' start (~5 s a run on 2 cores: ``reprocess.spark.connect.shared_session``).
    """
    from pyspark.sql import SparkSession

    from devstack import connect
    from reprocess.spark.connect import check_library, checked_session, client_env

    if not conf:
        with checked_session(connect.url()) as spark:
            yield spark
        return
    with client_env():
        spark = SparkSession.builder.remote(connect.url()).getOrCreate()
        try:
            check_library(spark, connect.url())
            for name, value in conf.items():
                spark.conf.set(name, value)
            yield spark
        finally:
            spark.stop()


def stage_over_connect(
    spec: PipelineSpec,
    run_id: str,
    *,
    batch_size: int | None = None,
    kafka: dict[str, Any] | None = None,
    conf: dict[str, str] | None = None,
    db_url: str | None = None,
    registry_config: str | None = None,
) -> None:
    """Stage a planned run as the DAG's Spark Connect launcher does: the job runs in this process,
    its Spark work on the session's Connect server. ``db_url`` replaces the app database's URL
    (a proxy in front of it)."""
    from reprocess.runner.spark_run import read_job

    kafka = kafka if kafka is not None else _kafka_from_env()
    with connect_session(conf) as spark:
        read_job(
            spark,
            spec=str(spec.source_file),
            fingerprint=spec.fingerprint,
            run_id=run_id,
            db_url=db_url or os.environ["AIRFLOW_CONN_REPROCESS_DB"],
            kafka_config=json.dumps(kafka),
            batch_size=str(batch_size) if batch_size else None,
            registry_config=registry_config,
        )


def reconcile_over_connect(
    engine: Engine,
    spec: PipelineSpec,
    start: datetime,
    end: datetime,
    check_id: str,
    registry_config: str | None = None,
) -> Any:
    """The reconcile DAG's three stages in this process, through the evaluator
    (:func:`reprocess.runner.window_job.check_window`): snapshot the window, stage it over Connect, record
    the verdicts (raises ReconciliationGap on a gap). ``registry_config``: an Avro pipeline's Schema
    Registry client config (JSON)."""
    from reprocess.core.window_stages import SnapshotWindow
    from reprocess.runner.window_job import check_window
    from reprocess.spark.job import WindowStager

    kafka = _kafka_from_env()
    with connect_session() as spark:
        stager = WindowStager(spark, os.environ["AIRFLOW_CONN_REPROCESS_DB"], kafka, registry_config)
        return check_window(engine, kafka, spec, SnapshotWindow(check_id, start, end), stager)


def _kafka_from_env() -> dict[str, Any]:
    return dict(json.loads(os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"])


def run_spark_stage(
    spec: PipelineSpec, run_id: str, *, launcher: str = "connect", timeout: float = 300, **kwargs: Any
) -> None:
    """Stage a planned run and wait: over Spark Connect (the default, as the DAG runs on the embedded
    default) or with ``launcher="submit"`` through spark-submit; a failed job fails the test."""
    if launcher == "connect":
        stage_over_connect(spec, run_id, **kwargs)
        return
    job = start_spark_stage(spec, run_id, **kwargs)
    output, _ = job.communicate(timeout=timeout)
    assert job.returncode == 0, output[-4000:]


def backfill(engine: Engine, kafka: dict[str, Any], spec: PipelineSpec, run_id: str) -> Any:
    """A backfill of everything (the form's defaults), timed; returns its commit result."""
    from reprocess.core.runs import RunRequest
    from reprocess.runner.start import commit_stored, snapshot_and_migrate

    started = time.monotonic()
    plan = snapshot_and_migrate(engine, kafka, spec, RunRequest.from_params({}), run_id)
    run_spark_stage(spec, plan.run_id)
    result = commit_stored(engine, spec, plan.run_id)
    print(f"{run_id}: {result} in {time.monotonic() - started:.1f} s")
    return result


def plan_stage_commit(
    engine: Engine,
    kafka: dict[str, Any],
    spec: PipelineSpec,
    request: Any,
    run_id: str,
    registry_config: str | None = None,
) -> Any:
    """One whole run as the DAG makes it (its stages: planning, then the Spark task over Connect and
    the commit when it reads anything); returns its plan. ``registry_config``: an Avro pipeline's."""
    from reprocess.core.stages import for_task
    from reprocess.core.tasks import Task
    from reprocess.runner.evaluate import RunContext, evaluate
    from reprocess.runner.start import start_run

    plan, stages = start_run(engine, kafka, spec, request, run_id)
    if for_task(stages, Task.SPARK):
        run_spark_stage(spec, run_id, kafka=kafka, batch_size=request.batch_size, registry_config=registry_config)
        evaluate(for_task(stages, Task.COMMIT), RunContext(engine, spec))
    return plan


def oracle_rows(produced: Any) -> dict[str, tuple[str, str, int, int]]:
    """oracle.expected_rows in the form target_rows returns (amounts normalised)."""
    from decimal import Decimal

    return {k: (s, str(Decimal(a).normalize()), p, o) for k, (s, a, p, o) in oracle.expected_rows(produced).items()}


def stage_count(engine: Engine, spec: PipelineSpec, run_id: str) -> int | None:
    """Rows in the run's stage table, None when it does not exist."""
    from reprocess.postgres.stage import stage_identifier

    with engine.connect() as conn:
        name = stage_identifier(spec, run_id).as_string(conn.connection.dbapi_connection)
        if conn.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar() is None:
            return None
        return conn.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()


def committed_ranges(engine: Engine, spec: PipelineSpec) -> dict[int, list[tuple[int, int]]]:
    """partition → its committed [start, end) ranges in offset order."""
    out: dict[int, list[tuple[int, int]]] = {}
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT partition, start_offset, end_offset FROM reprocess.committed_ranges WHERE pipeline = :p "
                "ORDER BY partition, start_offset"
            ),
            {"p": spec.name},
        )
        for partition, start, end in rows:
            out.setdefault(partition, []).append((start, end))
    return out


def assert_matches_oracle(
    engine: Engine, spec: PipelineSpec, produced: Any, ends: dict[int, int], *, invalid: int | None = None
) -> None:
    """No lost row, no doubled row: target, dead letters, ledger and committed ranges vs the oracle.

    ``ends`` are the true log ends per partition (from the produced messages' offsets, not the
    broker's answer); ``invalid`` overrides oracle.invalid_count when the spec rejects more.
    """
    assert target_rows(engine, spec) == oracle_rows(produced)
    assert dead_letter_count(engine, spec) == (oracle.invalid_count(produced) if invalid is None else invalid)
    assert ledger(engine, spec) == ends
    assert_tiled(engine, spec, ends)


def assert_tiled(engine: Engine, spec: PipelineSpec, ends: dict[int, int]) -> None:
    """Committed ranges tile each partition's log [0, end) exactly once: no gap (lost) and no
    overlap (doubled); offsets that hold no record (markers, aborted records) included."""
    for partition, pieces in committed_ranges(engine, spec).items():
        assert pieces[0][0] == 0 and pieces[-1][1] == ends[partition], (partition, pieces)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces)), (partition, pieces)
    assert set(committed_ranges(engine, spec)) == set(ends)


def log_ends(produced: Any) -> dict[int, int]:
    """partition → the offset after its last produced record (markers before it included)."""
    ends: dict[int, int] = {}
    for partition, offset, *_ in produced.messages:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


def corrupt_rows(engine: Engine, spec: PipelineSpec, key: str, assignment: str, n: int) -> set[Any]:
    """What a buggy transform or a person's UPDATE leaves: ``SET assignment`` on the ``n`` lowest
    keys, lineage untouched; returns their keys."""
    from sqlalchemy import text

    with engine.begin() as conn:
        return set(
            conn.execute(
                text(f"UPDATE {spec.qualified_target} SET {assignment} WHERE {key} IN (SELECT {key} "
                     f"FROM {spec.qualified_target} ORDER BY {key} LIMIT {n}) RETURNING {key}")
            ).scalars()
        )  # fmt: skip


def loaded_payments(engine: Engine, kafka: dict[str, Any], name: str, partitions: int, payments: int) -> Any:
    """A payments pipeline on its own topic of ``payments`` payments (demo_data.payment_events), loaded
    by a backfill; returns (its spec, the produced messages)."""
    from reprocess.kafka import demo_data

    spec = orders_spec(name, name, base=PAYMENTS_SPEC)
    demo_data.create_topic(kafka, name, partitions)
    produced = demo_data.produce(kafka, name, partitions, demo_data.payment_events(payments), malformed=())
    backfill(engine, kafka, spec, f"{name}-load")
    return spec, produced


def create_compacted_topic(kafka_config: dict[str, Any], topic: str) -> None:
    """Create ``topic`` (one partition) compacted, cleaned as soon as the cleaner can: it never cleans
    the active segment, so segments roll after 100 ms."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_config["bootstrap.servers"]})
    config = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
              "min.compaction.lag.ms": "0"}  # fmt: skip
    (created,) = admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values()
    created.result(30)
