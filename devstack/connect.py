"""The warm Spark Connect server of the embedded default (DESIGN §5): the venv's pyspark,
``local[2,4]`` (two cores, a failed task retried up to four times: ``LOCAL_MASTER``), gRPC on
127.0.0.1:``$REPROCESS_CONNECT_PORT``.

The pyspark wheel ships the Connect server class but no start script, so it is started with
``spark-submit --class SparkConnectServer`` (notes/spark-connect.md). Its Python workers run
the venv's Python (``PYSPARK_PYTHON``) and import ``reprocess`` from it; they are reused across
jobs, so the server records the library's fingerprint at start (in its Spark conf, which jobs
check, and in the state folder) and :func:`start` restarts a server whose library changed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Final

from devstack import jvm
from devstack.process import (
    ServiceError,
    ensure_port_free,
    env_port,
    pid_alive,
    spawn,
    state_dir,
    stop_pid,
    wait_for_port,
)

PORT_ENV: Final = "REPROCESS_CONNECT_PORT"
DEFAULT_PORT: Final = 15102  # not Spark's 15002: another Spark on the machine keeps its own
SERVER_CLASS: Final = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S: Final = 120
LOG_CONFIG: Final = jvm.POMS / "spark" / "log4j2.properties"


def port() -> int:
    return env_port(PORT_ENV, DEFAULT_PORT)


def url() -> str:
    return f"sc://127.0.0.1:{port()}"


def home() -> Path:
    return state_dir() / "connect"


def pidfile() -> Path:
    return home() / "server.pid"


def log() -> Path:
    return home() / "server.log"


def fingerprint_file() -> Path:
    return home() / "library.fingerprint"


def running() -> bool:
    return pid_alive(pidfile()) is not None


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def command(fingerprint: str) -> list[str]:
    from reprocess.spark.conf import LOCAL_MASTER, spark_conf
    from reprocess.spark.connect import FINGERPRINT_CONF

    conf = spark_conf(
        {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port()),
            # Runs share one session (reprocess.spark.connect.shared_session); keep it between hourly runs.
            "spark.connect.session.manager.defaultSessionTimeout": "24h",
            FINGERPRINT_CONF: fingerprint,
        }
    )
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", LOCAL_MASTER, "--class", SERVER_CLASS]
    # Spark's Kafka source and spark-avro (the jar set make install fetched) reach the server at its start.
    cmd += ["--jars", ",".join(str(j) for j in jvm.jars("spark"))]
    cmd += ["--name", "reprocess-connect"]
    for name, value in conf.items():
        cmd += ["--conf", f"{name}={value}"]
    return cmd


def start() -> None:
    """Start the server; restart a running one that holds another version of the library."""
    from reprocess.spark.connect import library_fingerprint

    fingerprint = library_fingerprint()
    if running():
        served = fingerprint_file().read_text().strip() if fingerprint_file().exists() else "unknown"
        if served == fingerprint:
            print(f"spark-connect: already running at {url()}")
            return
        print(f"spark-connect: the reprocess library changed ({served} → {fingerprint}); restarting the server")
        stop()
    ensure_port_free(port(), "spark-connect", PORT_ENV)
    home().mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        # The driver runs in spark-submit's JVM (client mode): its logging setup (Kafka clients at WARN).
        "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Dlog4j2.configurationFile=file:{LOG_CONFIG}",
    }
    started = time.monotonic()
    fingerprint_file().write_text(fingerprint)
    # cwd: the driver's spark-warehouse/ and derby files land in the state folder, not the repo.
    proc = spawn(command(fingerprint), log(), pidfile(), env, cwd=home())
    try:
        wait_for_port(port(), START_TIMEOUT_S, "spark-connect", log(), proc)
    except ServiceError:
        stop()
        raise
    print(f"spark-connect: started at {url()} in {time.monotonic() - started:.1f} s (log {log()})")


def stop() -> None:
    print("spark-connect: stopped" if stop_pid(pidfile(), "spark-connect", grace=20) else "spark-connect: not running")


def kill() -> None:
    """SIGKILL the server and its Python workers: a crash (the fault tests)."""
    import signal

    stop_pid(pidfile(), "spark-connect", grace=5, sig=signal.SIGKILL)


def status() -> str:
    return f"running at {url()}" if running() else "stopped"
