"""``reprocess spark-connect start|status|stop|warm-up``: a Spark Connect server for this installed library.

Where it listens: ``--host``/``--port``, else the ``spark_default`` connection when it is a
``spark_connect`` one (so the server starts where the DAGs' Spark tasks look for it), else
127.0.0.1:15002 (Spark Connect's own default).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Final

from reprocess.cli.common import EXIT_FOUND, EXIT_OK
from reprocess.spark.connect_server import DEFAULT_MASTER, START_TIMEOUT_S, ConnectServer, default_state_dir

NAME: Final = "spark-connect"
SUMMARY: Final = "start, check or stop a Spark Connect server that runs this library's jobs"
DESCRIPTION: Final = (
    "Start, check or stop a Spark Connect server from the installed pyspark, with Spark's Kafka source "
    "and spark-avro (Maven coordinates resolved by spark-submit, or the jars in $REPROCESS_SPARK_JARS), its "
    "Python workers on this Python, and this library's fingerprint in its conf (jobs refuse a server holding "
    "another one). `start` restarts a running server whose library changed; with --warm-up it then warms it "
    "up in the background (ten small stages of orders from the topic reprocess_warm_up, produced once into "
    "the kafka_default cluster, into stages of the reprocess_db database dropped after: the first run after a "
    "start then pays less of the JIT's compiling); `warm-up` runs that warm-up now. `status` exits 0 only "
    "when the server runs and holds this library. Host and port: the options, else the spark_default "
    "connection (type spark_connect), else 127.0.0.1:15002."
)
EXAMPLES: Final = (
    ("start where spark_default points (restarts a server whose library changed)", "reprocess spark-connect start"),
    ("running, and holding this library? (exit 0 only then)", "reprocess spark-connect status --json"),
    (
        "on another port, with Spark's INFO lines in its log",
        "reprocess spark-connect start --port 15003 --log-level INFO",
    ),
    (
        "start, then warm it up in the background (writes the topic reprocess_warm_up and stages it drops)",
        "reprocess spark-connect start --warm-up",
    ),
    ("stop it", "reprocess spark-connect stop"),
)
ACTIONS: Final = ("start", "status", "stop", "warm-up")
SPARK_CONN_ID: Final = "spark_default"


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "action", choices=ACTIONS, help="start (or restart on a changed library), status, stop, warm-up (now)"
    )
    cmd.add_argument("--host", help=f"address to listen on (default: the {SPARK_CONN_ID} connection's, or 127.0.0.1)")
    cmd.add_argument(
        "--port", type=_port, help=f"gRPC port (default: the {SPARK_CONN_ID} connection's, or Spark's 15002)"
    )
    cmd.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        # Said, not resolved: the help (and docs/cli.md, made from it) reads the same on every machine.
        help="the server's pid, log and fingerprint (default $XDG_STATE_HOME/reprocess/spark-connect, "
        "else ~/.local/state/reprocess/spark-connect)",
    )
    cmd.add_argument(
        "--master",
        default=DEFAULT_MASTER,
        help=f"Spark master (default {DEFAULT_MASTER}: all cores, 4 attempts a task)",
    )
    cmd.add_argument("--log-level", help="the server's Spark log level (default: [reprocess] spark_log_level, or WARN)")
    cmd.add_argument("--timeout", type=float, default=START_TIMEOUT_S, help="seconds start waits for the port")
    cmd.add_argument("--json", action="store_true", help="status as one JSON object")
    cmd.add_argument(
        "--warm-up", action="store_true",
        help="after start, warm the server up in the background (writes to kafka_default and reprocess_db)",
    )  # fmt: skip


def warm_up_connections() -> tuple[dict[str, Any], str]:
    """What the warm-up reads and stages through: the kafka_default cluster and the reprocess_db database."""
    from reprocess.airflow.hooks import AppDatabaseHook, KafkaConfigHook

    return KafkaConfigHook().client_config(), AppDatabaseHook().url()


def _port(value: str) -> int:
    port = int(value)
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1-65535)")
    return port


def endpoint(args: argparse.Namespace) -> tuple[str, int]:
    """``--host``/``--port``; what they leave out comes from the ``spark_default`` connection when it is a
    Spark Connect one, else 127.0.0.1:15002."""
    from reprocess.core.processes import LOOPBACK
    from reprocess.spark.connect import DEFAULT_PORT

    if args.host is not None and args.port is not None:
        return args.host, args.port
    host, port = _connection_endpoint() or (LOOPBACK, DEFAULT_PORT)
    return args.host or host, args.port or port


def _connection_endpoint() -> tuple[str, int] | None:
    """(host, port) of the ``spark_default`` connection, when one of type ``spark_connect`` is defined."""
    from reprocess.airflow.hooks import spark_connect_url
    from reprocess.core.errors import ConnectionConfigError
    from reprocess.spark.connect import endpoint as url_endpoint

    try:
        url = spark_connect_url()
    except ConnectionConfigError:  # none defined: the defaults
        return None
    return None if url is None else url_endpoint(url)


def server(args: argparse.Namespace) -> ConnectServer:
    """The server the arguments name; its log level (``start`` only) defaults to ``[reprocess] spark_log_level``."""
    host, port = endpoint(args)
    level = args.log_level
    if args.action == "start" and level is None:
        from reprocess.airflow.settings import spark_log_level

        level = spark_log_level()
    return ConnectServer(
        host=host, port=port, state_dir=args.state_dir or default_state_dir(), master=args.master, log_level=level
    )


def run(args: argparse.Namespace) -> int:
    from reprocess.spark import connect_server

    target = server(args)
    if args.action == "start":
        print(connect_server.start(target, args.timeout))
        if args.warm_up and (started := connect_server.warm_up_in_background(target)):
            print(started)
        return EXIT_OK
    if args.action == "warm-up":
        said = connect_server.warm_up(target, warm_up_connections)
        print(said or f"spark-connect: {target.url} is warm already (or not running)")
        return EXIT_OK
    if args.action == "stop":
        stopped = connect_server.stop(target)
        print(f"spark-connect: {'stopped' if stopped else 'not running'} ({target.state_dir})")
        return EXIT_OK
    found = connect_server.status(target)
    if args.json:
        print(json.dumps({"url": found.url, "running": found.running, "pid": found.pid, "library": found.library,
                          "served": found.served, "matches": found.matches}))  # fmt: skip
    else:
        print(found.describe())
    return EXIT_OK if found.matches else EXIT_FOUND
