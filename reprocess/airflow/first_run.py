"""First-run setup of an Airflow that runs the pipelines (``reprocess init``): the ``spark`` pool,
each connection checked by connecting, the app database migrated; one finding per step.

Every step runs even when an earlier one fails, and each failure becomes an error finding with
its fix instead of an exception: a new install usually has several things to set, and one run
should name them all. Everything here is idempotent: an existing pool is left as it is (its
size may have been chosen for a larger Spark), migrations already applied are skipped.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Final

from reprocess.airflow.common import SPARK_POOL, SPARK_POOL_DESCRIPTION, SPARK_POOL_SLOTS
from reprocess.airflow.hooks import (
    SPARK_ADD,
    SPARK_CONN_ID,
    AppDatabaseHook,
    KafkaConfigHook,
    SchemaRegistryHook,
    connection,
    spark_connect_url,
)
from reprocess.core.spec import PipelineSpec
from reprocess.operations.findings import Finding, Severity

KAFKA_TIMEOUT_S: Final = 5.0  # a broker on the network answers metadata in well under a second


def init(specs: Iterable[PipelineSpec], pool_slots: int = SPARK_POOL_SLOTS) -> list[Finding]:
    """The pool, the app database (connected, then migrated), Kafka, each Schema Registry a spec
    reads, and the Spark launcher: what a first backfill needs, in the order it needs them."""
    specs = list(specs)
    findings = [_step("pool", SPARK_POOL, lambda: ensure_pool(pool_slots), POOL_FIX)]
    findings.append(_step("postgres", AppDatabaseHook.default_conn_name, migrate_app_db, APP_DB_FIX))
    findings.append(_step("kafka", KafkaConfigHook.default_conn_name, check_kafka, KAFKA_FIX))
    for conn_id in sorted({s.schema_registry for s in specs if s.needs_registry}):
        users = [s for s in specs if s.needs_registry and s.schema_registry == conn_id]
        findings.append(_step("registry", conn_id, partial(check_registry, conn_id, users), REGISTRY_FIX))
    findings.append(_step("spark", SPARK_CONN_ID, check_spark, SPARK_FIX))
    return findings


POOL_FIX: Final = (
    "`airflow db migrate` if this Airflow's metadata DB is not set up yet (the pool table is in it); "
    f"or create the pool by hand: `airflow pools set {SPARK_POOL} {SPARK_POOL_SLOTS} '{SPARK_POOL_DESCRIPTION}'`"
)
APP_DB_FIX: Final = (
    "set the reprocess_db connection (postgres: host, port, login, password, schema = the database) to a "
    "PostgreSQL that accepts that login and holds that database; `airflow connections get reprocess_db` shows it"
)
KAFKA_FIX: Final = (
    "check the kafka_default connection's extra: `bootstrap.servers` must name brokers reachable from here "
    "(and the security.* keys the brokers require)"
)
REGISTRY_FIX: Final = "check the connection's host (the registry's URL), login and password"
SPARK_FIX: Final = (
    "spark_default: for Spark Connect (type spark_connect) a server at its host and port, started with this "
    "reprocess version; for spark-submit (type spark) `spark-submit` and Java on the PATH of Airflow's workers"
)


def _step(check: str, source: str, step: Callable[[], str], fix: str) -> Finding:
    """An OK finding with what ``step`` did, or an error with the failure and ``fix``.

    Any exception: a setup check reports what failed whatever it is (a missing connection, a
    refused login, a DNS name that does not resolve) and goes on to the next step.
    """
    try:
        return Finding(source, check, Severity.OK, step())
    except Exception as exc:  # reported as a finding, with its type, never swallowed
        return Finding(source, check, Severity.ERROR, f"{type(exc).__name__}: {_first_line(exc)}", fix)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or repr(exc)
    return text.splitlines()[0]


def ensure_pool(slots: int) -> str:
    """The ``spark`` pool every pipeline's Spark task waits in: created when missing, else left as is.

    Through Airflow's own model on the metadata DB (what ``airflow pools set`` does, without a
    second Airflow start-up).
    """
    from airflow.models.pool import Pool

    existing = Pool.get_pool(SPARK_POOL)
    if existing is not None:
        return f"pool `{SPARK_POOL}` exists with {existing.slots} slots; left as is"
    Pool.create_or_update_pool(SPARK_POOL, slots, SPARK_POOL_DESCRIPTION, include_deferred=False)
    return f"pool `{SPARK_POOL}` created with {slots} slots (docs/performance.md says why {SPARK_POOL_SLOTS})"


def migrate_app_db() -> str:
    """Connect to the app database and apply the migrations it lacks."""
    from sqlalchemy import text

    from reprocess.postgres.db import make_engine, migrate

    engine = make_engine(AppDatabaseHook().url())
    try:
        with engine.connect() as conn:
            server = conn.execute(text("SHOW server_version")).scalar_one()
        applied = migrate(engine)
    finally:
        engine.dispose()
    done = f"applied {', '.join(applied)}" if applied else "already up to date"
    return f"PostgreSQL {server} answers; migrations {done}"


def check_kafka() -> str:
    """List the brokers' topics, with a short timeout: a wrong address fails in seconds."""
    from confluent_kafka import KafkaException

    from reprocess.kafka.clients import make_admin

    config = KafkaConfigHook().client_config()
    servers = config["bootstrap.servers"]
    try:
        metadata = make_admin(config).list_topics(timeout=KAFKA_TIMEOUT_S)
    except KafkaException as exc:  # its text names no address: say which one did not answer
        raise KafkaException(f"bootstrap.servers={servers}: {exc.args[0].str()}") from exc
    return f"{len(metadata.brokers)} broker(s) at {servers} answer; {len(metadata.topics)} topics"


def check_registry(conn_id: str, specs: list[PipelineSpec]) -> str:
    """Read the writer schemas of the specs that use this registry, as a run reads them."""
    from reprocess.kafka.registry import value_subjects, writer_schemas

    config = SchemaRegistryHook(conn_id).client_config()
    subjects = [subject for spec in specs for subject in value_subjects(spec)]
    writer_schemas(config, subjects)
    return f"the registry at {config['url']} holds {', '.join(subjects)} ({', '.join(s.name for s in specs)})"


def check_spark() -> str:
    """Spark Connect: the server answers and holds this library (the check a run's Spark task
    makes). spark-submit: the launcher and Java are found."""
    url = spark_connect_url()
    if url is not None:
        from reprocess.spark.connect import checked_session, library_fingerprint

        with checked_session(url):
            return f"Spark Connect server at {url.split('/;')[0]} answers and holds reprocess {library_fingerprint()}"
    conn = connection(SPARK_CONN_ID, SPARK_ADD)
    binary = str(conn.extra_dejson.get("spark_binary") or "spark-submit")
    launcher = shutil.which(binary)
    if launcher is None:
        raise FileNotFoundError(f"spark-submit launcher {binary!r} is not on the PATH")
    java = java_executable()
    if java is None:
        raise FileNotFoundError("no Java: neither $JAVA_HOME/bin/java nor `java` on the PATH")
    return f"spark-submit ({launcher}) to {conn.host}, Java {java}"


def java_executable() -> str | None:
    """The ``java`` spark-submit will start: ``$JAVA_HOME/bin/java`` first, as Spark's launcher picks it."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")
