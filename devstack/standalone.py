"""A real Spark standalone cluster on this machine: one master and two workers from the venv's pyspark.

The pyspark wheel has no ``start-master.sh``/``start-worker.sh``, but its jars hold the
``Master`` and ``Worker`` classes, started with ``spark-class`` (notes/spark-connect.md).
Everything binds loopback; ports derive from ``$REPROCESS_SPARK_MASTER_PORT`` (P): master P,
its web UI P+1, worker i RPC P+2+2i and web UI P+3+2i. Each worker offers 1 core and 1 GiB.
Worker i is host ``127.0.0.<i+1>`` (:func:`worker_host`; Linux routes all of 127/8 to loopback):
two hosts, as a cluster has, so Spark's speculation can run a task's copy on the other worker
(it never starts a copy on a host where the task already ran, so one-host clusters never speculate).

Jobs run in client mode (Python on a standalone master allows no other): the driver is the
Airflow task, the executors are JVMs the workers start, with their own Python workers. Those
receive the library the way a cluster's nodes do: installed in the workers' environment, here
a venv under the state folder holding the wheel built from this checkout (``devstack.wheel``),
not the checkout itself. Shipping the wheel with ``--py-files`` instead would still need
``confluent-kafka`` and ``pyarrow`` (native code) installed on the workers, so the library is
installed next to them, as the compose image does. The venv is rebuilt when the library's
fingerprint changes, so a job never runs old executor code under a new driver.

A job is pointed at the cluster by :func:`job_env`: ``spark_default`` and ``PYSPARK_PYTHON``, the
executors' Python (the driver keeps ``PYSPARK_DRIVER_PYTHON``, the venv). Not a
``spark-defaults.conf`` in another ``SPARK_CONF_DIR``: that dir is on the driver's class path,
so the JVM would refuse the class archive built without it (~10 s more per job).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

from devstack import wheel
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

PORT_ENV: Final = "REPROCESS_SPARK_MASTER_PORT"
DEFAULT_PORT: Final = 17077
WORKERS: Final = 2
WORKER_CORES: Final = 1
WORKER_MEMORY: Final = "1g"
DAEMON_MEMORY: Final = "512m"  # master and worker JVMs only schedule; the executors get WORKER_MEMORY
START_TIMEOUT_S: Final = 90


def port() -> int:
    return env_port(PORT_ENV, DEFAULT_PORT)


def master_url() -> str:
    return f"spark://127.0.0.1:{port()}"


def web_ui() -> str:
    return f"http://127.0.0.1:{port() + 1}"


def home() -> Path:
    return state_dir() / "spark-cluster"


def executor_python() -> Path:
    return home() / "python" / "bin" / "python"


def _pidfile(name: str) -> Path:
    return home() / f"{name}.pid"


def _log(name: str) -> Path:
    return home() / "logs" / f"{name}.log"


def logs() -> list[Path]:
    """The master's and the workers' logs (none before the first start)."""
    return sorted((home() / "logs").glob("*.log"))


def worker_host(i: int) -> str:
    """Worker ``i``'s host: its own loopback address, so the two workers are two hosts to Spark."""
    return f"127.0.0.{i + 1}"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _env() -> dict[str, str]:
    """The daemons' environment. Their PATH holds no Python with pyspark (no venv), so an
    executor can only run the Python its job names (:func:`job_env`), never the checkout's."""
    java = os.environ.get("JAVA_HOME")
    inherited = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return {
        **inherited,
        "PATH": os.pathsep.join([*([f"{java}/bin"] if java else []), "/usr/local/bin", "/usr/bin", "/bin"]),
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOG_DIR": str(home() / "logs"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
    }


def _spark_class(*args: str) -> list[str]:
    return [str(_spark_home() / "bin" / "spark-class"), *args]


def state() -> dict[str, Any]:
    """The master's own view (``/json/``): status, alive workers, finished applications."""
    with urllib.request.urlopen(f"{web_ui()}/json/", timeout=5) as response:
        result: dict[str, Any] = json.load(response)
    return result


def running() -> bool:
    return pid_alive(_pidfile("master")) is not None


def healthy() -> bool:
    """The master is ALIVE and every worker registered with it."""
    try:
        view = state()
    except (OSError, ValueError):  # ValueError: a master still starting answers /json/ with its HTML page
        return False
    return view.get("status") == "ALIVE" and view.get("aliveworkers") == WORKERS


def _refresh_library() -> None:
    """Rebuild the executors' venv from this checkout when the library changed since the last build."""
    from reprocess.spark.connect import library_fingerprint

    stamp = home() / "python.fingerprint"
    fingerprint = library_fingerprint()
    if executor_python().exists() and stamp.exists() and stamp.read_text() == fingerprint:
        return
    started = time.monotonic()
    python = wheel.install_env(home() / "python", wheel.build(home() / "dist"))
    stamp.write_text(fingerprint)
    print(f"spark-cluster: executors' Python {python} runs this checkout's wheel ({time.monotonic() - started:.0f} s)")


def start() -> None:
    """Start master and workers (idempotent); refresh the executors' library when it changed."""
    _refresh_library()
    if running() and healthy():
        print(f"spark-cluster: already running at {master_url()} (UI {web_ui()})")
        return
    stop()
    started = time.monotonic()
    for offset in range(1 + 2 * WORKERS + 1):
        ensure_port_free(port() + offset, "spark-cluster", PORT_ENV)
    env = _env()
    master = spawn(
        _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(port()), "--webui-port", str(port() + 1)),
        _log("master"), _pidfile("master"), env, cwd=home(),
    )  # fmt: skip
    wait_for_port(port() + 1, START_TIMEOUT_S, "spark-cluster master", _log("master"), master)
    for i in range(WORKERS):
        work = home() / "work" / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        spawn(
            _spark_class("org.apache.spark.deploy.worker.Worker", master_url(), "--host", worker_host(i),
                         "--port", str(port() + 2 + 2 * i), "--webui-port", str(port() + 3 + 2 * i),
                         "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--work-dir", str(work)),
            _log(f"worker-{i}"), _pidfile(f"worker-{i}"), {**env, "SPARK_LOCAL_IP": worker_host(i)}, cwd=home(),
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy():
        if time.monotonic() > deadline:
            stop()
            raise ServiceError(
                f"spark-cluster: {WORKERS} workers did not register with {master_url()} within {START_TIMEOUT_S}s; "
                f"see {home() / 'logs'}"
            )
        time.sleep(0.5)
    print(f"spark-cluster: master {master_url()} with {WORKERS} workers in {time.monotonic() - started:.1f} s "
          f"(UI {web_ui()})")  # fmt: skip


def stop() -> None:
    stopped = [stop_pid(_pidfile(f"worker-{i}"), f"spark-cluster worker {i}") for i in range(WORKERS)]
    stopped.append(stop_pid(_pidfile("master"), "spark-cluster master"))
    print("spark-cluster: stopped" if any(stopped) else "spark-cluster: not running")


def job_env() -> dict[str, str]:
    """What points a job (the DAG's spark_default) at this cluster: client mode, the executors' Python,
    and Spark's Kafka source by its Maven coordinates (``--packages``), as a cluster gets it.

    spark-submit's Ivy resolves them from Maven Central with ``devstack/jvm/ivysettings.xml`` (and
    caches them in ``~/.ivy2.5.2``): its default chain looks in ``~/.m2`` first, where ``make
    install``'s Maven left the excluded dependencies' poms without their jars, and fails ("download
    failed: org.slf4j#slf4j-api;2.0.17!slf4j-api.jar")."""
    from reprocess.spark.conf import IVY_SETTINGS_ENV, JARS_ENV

    connection = {"conn_type": "spark", "host": master_url(), "extra": {"deploy-mode": "client"}}
    return {
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(connection),
        "PYSPARK_PYTHON": str(executor_python()),
        JARS_ENV: "",
        IVY_SETTINGS_ENV: str(Path(__file__).resolve().parent / "jvm" / "ivysettings.xml"),
    }


def status() -> str:
    return f"running at {master_url()} (UI {web_ui()})" if running() and healthy() else "stopped"
