"""Start, check and stop a Spark Connect server that runs this library's jobs (``reprocess spark-connect``,
and the checkout's embedded server, ``devstack.connect``): one way for a wheel and a checkout.

The pyspark wheel ships the server class but no start script, so it is started with
``spark-submit --class SparkConnectServer`` (notes/spark-connect.md), in client mode on ``master``:

- Spark's Kafka source and spark-avro reach it at its start (clients cannot add jars): the local
  jars named, else :func:`reprocess.spark.conf.dependency_args` (``$REPROCESS_SPARK_JARS``, or
  the pinned Maven coordinates, which spark-submit resolves with Ivy and caches in ``~/.ivy2*``).
- Its Python workers run this Python (``PYSPARK_PYTHON``) and import ``reprocess`` from it. They
  are reused across jobs, so the server records this library's fingerprint in its Spark conf
  (:data:`~reprocess.spark.connect.FINGERPRINT_CONF`, which every job checks) and in its state
  folder (what :func:`status` compares), and :func:`start` restarts a server whose library changed.
- Its driver logs through the package's log4j2 file at ``[reprocess] spark_log_level`` (WARN).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from reprocess.core.errors import ServiceError
from reprocess.core.processes import LOOPBACK, ensure_port_free, pid_alive, port_open, spawn, stop_pid, wait_for_port
from reprocess.spark.conf import dependency_args, spark_conf
from reprocess.spark.connect import CLIENT_MARKS, DEFAULT_PORT, FINGERPRINT_CONF, library_fingerprint

SERVER_CLASS: Final = "org.apache.spark.sql.connect.service.SparkConnectServer"
# All cores, and up to four attempts of a task: plain local[*] fails a whole job at a task's first
# failure (a Python worker killed, a dropped connection); four is a cluster's spark.task.maxFailures.
DEFAULT_MASTER: Final = "local[*,4]"
START_TIMEOUT_S: Final = 120.0
WHAT: Final = "spark-connect"


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/reprocess/spark-connect`` (``~/.local/state/…``): the pid, log and fingerprint."""
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "reprocess" / "spark-connect"


@dataclass(frozen=True)
class ConnectServer:
    """Where one server listens and keeps its state, and how it runs.

    ``jars``: local jar files for Spark's Kafka source; empty means :func:`dependency_args`.
    ``log_level``: None means ``$REPROCESS_SPARK_LOG_LEVEL`` or WARN.
    """

    host: str = LOOPBACK
    port: int = DEFAULT_PORT
    state_dir: Path = field(default_factory=default_state_dir)
    master: str = DEFAULT_MASTER
    jars: tuple[str, ...] = ()
    log_level: str | None = None

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    @property
    def pidfile(self) -> Path:
        return self.state_dir / "server.pid"

    @property
    def log(self) -> Path:
        return self.state_dir / "server.log"

    @property
    def fingerprint_file(self) -> Path:
        return self.state_dir / "library.fingerprint"

    @property
    def warmed_file(self) -> Path:
        """The pid of the server the warm-up last warmed (:func:`warm_up`)."""
        return self.state_dir / "warmed.pid"

    @property
    def warm_up_pidfile(self) -> Path:
        return self.state_dir / "warm-up.pid"

    @property
    def warm_up_log(self) -> Path:
        return self.state_dir / "warm-up.log"


def spark_home() -> Path:
    """The installed pyspark: Spark's jars and ``bin/spark-submit``."""
    import pyspark

    return Path(pyspark.__file__).parent


def command(server: ConnectServer, fingerprint: str) -> list[str]:
    """The server's spark-submit command line, with ``fingerprint`` in its Spark conf.

    Examples
    --------
    >>> cmd = command(ConnectServer(port=15999, jars=("/j/kafka.jar",), log_level="INFO"), "abc")
    >>> cmd[1:5], cmd[5:7]
    (['--master', 'local[*,4]', '--class', 'org.apache.spark.sql.connect.service.SparkConnectServer'], \
['--jars', '/j/kafka.jar'])
    >>> "spark.connect.grpc.binding.port=15999" in cmd and f"{FINGERPRINT_CONF}=abc" in cmd
    True
    >>> any("-Dreprocess.spark.logLevel=INFO" in arg for arg in cmd)
    True
    """
    conf = spark_conf(
        {
            "spark.connect.grpc.binding.address": server.host,
            "spark.connect.grpc.binding.port": str(server.port),
            # Runs share one session (reprocess.spark.connect.shared_session); keep it between hourly runs.
            "spark.connect.session.manager.defaultSessionTimeout": "24h",
            FINGERPRINT_CONF: fingerprint,
        },
        level=server.log_level,
    )
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", server.master, "--class", SERVER_CLASS]
    deps = {"jars": ",".join(server.jars)} if server.jars else dependency_args(json_udf=False)
    for name, value in deps.items():
        cmd += [f"--{name}", value]
    cmd += ["--name", "reprocess-connect"]
    for name, value in conf.items():
        cmd += ["--conf", f"{name}={value}"]
    return cmd


def served_fingerprint(server: ConnectServer) -> str | None:
    """The library fingerprint the running server was started with (None: not running, or unknown)."""
    if pid_alive(server.pidfile) is None or not server.fingerprint_file.exists():
        return None
    return server.fingerprint_file.read_text().strip() or None


def start(server: ConnectServer, timeout_s: float = START_TIMEOUT_S, port_fix: str = "choose another --port") -> str:
    """Start the server; restart a running one that holds another version of the library. Returns what it
    did. ``port_fix``: the advice when another process holds the port."""
    fingerprint = library_fingerprint()
    restarted = ""
    if pid_alive(server.pidfile) is not None:
        served = served_fingerprint(server) or "unknown"
        if served == fingerprint:
            return f"{WHAT}: already running at {server.url} (library {fingerprint})"
        stop(server)
        restarted = f"the reprocess library changed ({served} → {fingerprint}): restarted; "
    ensure_port_free(server.port, WHAT, port_fix, server.host)
    server.state_dir.mkdir(parents=True, exist_ok=True)
    env = {name: value for name, value in os.environ.items() if name not in CLIENT_MARKS}
    env.update(SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=sys.executable)
    if server.host == LOOPBACK:
        env["SPARK_LOCAL_IP"] = LOOPBACK
    started = time.monotonic()
    server.fingerprint_file.write_text(fingerprint)
    # cwd: the driver's spark-warehouse/ and derby files land in the state folder.
    proc = spawn(command(server, fingerprint), server.log, server.pidfile, env, cwd=server.state_dir)
    try:
        wait_for_port(server.port, timeout_s, WHAT, server.log, proc, server.host)
    except ServiceError:
        stop(server)
        raise
    return f"{WHAT}: {restarted}started at {server.url} in {time.monotonic() - started:.1f} s (log {server.log})"


def _unwarmed(server: ConnectServer) -> int | None:
    """The running server's pid, unless the warm-up has warmed it already (or it is not running)."""
    pid = pid_alive(server.pidfile)
    warmed = server.warmed_file.read_text().strip() if server.warmed_file.exists() else ""
    return None if pid is None or warmed == str(pid) else pid


def warm_up(
    server: ConnectServer, connections: Callable[[], tuple[Mapping[str, Any], str]], passes: int | None = None
) -> str | None:
    """Run the warm-up (:mod:`reprocess.spark.warm_up`, ``passes`` stages: its ``PASSES`` unless a test
    wants fewer) on a running server that has not had it since its start, reading the Kafka cluster and
    staging in the database ``connections()`` gives (the caller's ``kafka_default`` and ``reprocess_db``:
    this layer reads no Airflow connection); returns what it did (None: nothing to do). Never raises: a
    warm-up is worth seconds of the first run, never a failed start, so a missing connection or an
    unreachable service is said and the server still serves."""
    from reprocess.spark import warm_up as warming

    pid = _unwarmed(server)
    if pid is None:
        return None
    try:
        kafka, db_url = connections()
    except Exception as exc:  # no such connection: the first run will say what is missing
        return f"{WHAT}: no warm-up ({str(exc).splitlines()[0][:300]})"
    started = time.monotonic()
    try:
        passes = passes or warming.PASSES
        rows = warming.warm_up(server.url, kafka, db_url, passes)
    except Exception as exc:  # the first run will say what is wrong, with its own context
        return f"{WHAT}: warm-up failed ({str(exc).splitlines()[0][:300]}); the first run will be cold"
    server.warmed_file.write_text(str(pid))
    return f"{WHAT}: warmed up in {time.monotonic() - started:.1f} s ({passes} stages, {rows} stage rows)"


def warm_up_in_background(server: ConnectServer) -> str | None:
    """:func:`warm_up` in a process of its own (``reprocess spark-connect warm-up``), so a start
    returns once the server listens: the warm-up's ten stages took 161 s at load 15-28 on a 2-core
    machine (one stage 96-99 s: their fixed costs, not their records). A run started meanwhile
    shares the work. Returns what it started (None: the server is warm, or a warm-up is under way)."""
    if _unwarmed(server) is None or pid_alive(server.warm_up_pidfile) is not None:
        return None
    where = ["--host", server.host, "--port", str(server.port), "--state-dir", str(server.state_dir)]
    cmd = [sys.executable, "-m", "reprocess.cli", "spark-connect", "warm-up", *where]
    spawn(cmd, server.warm_up_log, server.warm_up_pidfile, os.environ, cwd=server.state_dir)
    return f"{WHAT}: warming up in the background (log {server.warm_up_log})"


def stop(server: ConnectServer) -> bool:
    """Stop the server and its Python workers (and a warm-up under way, which would only fail);
    False when the server was not running."""
    stop_pid(server.warm_up_pidfile, f"{WHAT} warm-up", grace=5)
    return stop_pid(server.pidfile, WHAT, grace=20)


@dataclass(frozen=True)
class ServerStatus:
    """What ``reprocess spark-connect status`` reports."""

    url: str
    pid: int | None
    listening: bool
    served: str | None
    library: str

    @property
    def running(self) -> bool:
        return self.pid is not None and self.listening

    @property
    def matches(self) -> bool:
        return self.running and self.served == self.library

    def describe(self) -> str:
        """One paragraph: runs or not, where, and whether its library is this one (with the fix).

        Examples
        --------
        >>> print(ServerStatus("sc://h:1", 7, True, "aa", "bb").describe())
        spark-connect: running at sc://h:1 (pid 7); its library aa differs from this one (bb): its Python \
workers would run other code. Restart it: `reprocess spark-connect start`.
        """
        if self.pid is None:
            return f"{WHAT}: not running (no live server in its state folder): `reprocess spark-connect start`"
        if not self.listening:
            return f"{WHAT}: process {self.pid} runs but {self.url} does not answer (starting, or stuck: see its log)"
        if self.matches:
            return f"{WHAT}: running at {self.url} (pid {self.pid}); library {self.library} matches this one"
        return (
            f"{WHAT}: running at {self.url} (pid {self.pid}); its library {self.served or 'unknown'} differs from "
            f"this one ({self.library}): its Python workers would run other code. Restart it: "
            "`reprocess spark-connect start`."
        )


def status(server: ConnectServer) -> ServerStatus:
    """Whether the server of ``server.state_dir`` runs and answers, and which library it holds."""
    pid = pid_alive(server.pidfile)
    return ServerStatus(
        url=server.url,
        pid=pid,
        listening=pid is not None and port_open(server.port, server.host),
        served=served_fingerprint(server),
        library=library_fingerprint(),
    )
