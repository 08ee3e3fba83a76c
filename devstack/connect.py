"""The warm Spark Connect server of the embedded default (DESIGN §5): the venv's pyspark,
``local[8,4]`` (eight task threads, a failed task retried up to four times: ``LOCAL_MASTER``), gRPC on
127.0.0.1:``$REPROCESS_CONNECT_PORT``.

It is the product's server (``reprocess.spark.connect_server``, what ``reprocess spark-connect
start`` runs for a wheel user), started the same way: spark-submit of the server class, Python
workers on the venv's Python, the library's fingerprint in its conf, a restart when the library
changed. Only its settings are the checkout's: the port, the state folder, ``LOCAL_MASTER`` and
``make install``'s local jars (offline). Its warm-up is the product's too (``reprocess.spark.warm_up``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from devstack import jvm
from devstack.process import env_port, pid_alive, state_dir, stop_pid
from reprocess.cli.spark_connect import warm_up_connections
from reprocess.core.processes import LOOPBACK
from reprocess.spark import connect_server
from reprocess.spark.conf import LOCAL_MASTER

PORT_ENV: Final = "REPROCESS_CONNECT_PORT"
DEFAULT_PORT: Final = 15102  # not Spark's 15002: another Spark on the machine keeps its own


def port() -> int:
    return env_port(PORT_ENV, DEFAULT_PORT)


def home() -> Path:
    return state_dir() / "connect"


def server(jars: tuple[str, ...] = ()) -> connect_server.ConnectServer:
    """The embedded server: the product's (``reprocess spark-connect``), on loopback, ``local[8,4]``,
    with ``make install``'s local jars (``jars``) so it starts offline."""
    return connect_server.ConnectServer(host=LOOPBACK, port=port(), state_dir=home(), master=LOCAL_MASTER, jars=jars)


def url() -> str:
    return server().url


def pidfile() -> Path:
    return server().pidfile


def log() -> Path:
    return server().log


def running() -> bool:
    return pid_alive(pidfile()) is not None


def start() -> None:
    """Start the server; restart a running one that holds another version of the library."""
    jars = tuple(str(j) for j in jvm.jars("spark"))
    print(connect_server.start(server(jars), port_fix=f"set {PORT_ENV} to a free port"))


def warmed_file() -> Path:
    return server().warmed_file


def warm_up_pidfile() -> Path:
    return server().warm_up_pidfile


def warm_up(passes: int | None = None) -> None:
    """The product's warm-up (``reprocess.spark.connect_server.warm_up``) on this server, once per start
    (``passes``: fewer stages than the product's, for the tests of the mechanism)."""
    said = connect_server.warm_up(server(), warm_up_connections, passes)
    if said:
        print(said)


def warm_up_in_background() -> None:
    """:func:`warm_up` in a process of its own, so ``make services`` returns at once; its output:
    ``<state>/connect/warm-up.log``."""
    said = connect_server.warm_up_in_background(server())
    if said:
        print(said)


def stop() -> None:
    print("spark-connect: stopped" if connect_server.stop(server()) else "spark-connect: not running")


def kill() -> None:
    """SIGKILL the server and its Python workers: a crash (the fault tests)."""
    import signal

    stop_pid(pidfile(), "spark-connect", grace=5, sig=signal.SIGKILL)


def status() -> str:
    return f"running at {url()}" if running() else "stopped"
