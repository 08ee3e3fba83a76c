"""The warm Spark Connect server of the embedded default (DESIGN §5): the venv's pyspark,
``local[8,4]`` (eight task threads, a failed task retried up to four times: ``LOCAL_MASTER``), gRPC on
127.0.0.1:``$REPROCESS_CONNECT_PORT``.

It is the product's server (``reprocess.spark.connect_server``, what ``reprocess spark-connect
start`` runs for a wheel user), started the same way: spark-submit of the server class, Python
workers on the venv's Python, the library's fingerprint in its conf, a restart when the library
changed. Only its settings are the checkout's: the port, the state folder, ``LOCAL_MASTER`` and
``make install``'s local jars (offline). The warm-up below is the checkout's own.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Final

from devstack import jvm
from devstack.process import env_port, pid_alive, spawn, state_dir, stop_pid
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


WARM_UP_TOPIC: Final = "reprocess_warm_up"
WARM_UP_ORDERS: Final = 2_000  # ~11,000 order events on 2 partitions, and the malformed ones


def warmed_file() -> Path:
    return home() / "warmed.pid"


def warm_up_pidfile() -> Path:
    return home() / "warm-up.pid"


def _unwarmed_server() -> int | None:
    """The running server's pid, unless it is warm already (or not running)."""
    pid = pid_alive(pidfile())
    if pid is None or (warmed_file().exists() and warmed_file().read_text().strip() == str(pid)):
        return None
    return pid


def warm_up() -> None:
    """Run one small stage on a server that has not run one yet (``reprocess.spark.job.warm_up``).

    The first run after a start otherwise pays the JIT, code generation and the Python workers'
    start. The records (orders from ``pipelines/orders.yaml``, malformed ones included) sit in
    their own topic, produced once; the stage is dropped again. Skipped, saying why, when the
    broker or the app database is not there: a warm-up is worth seconds, never a failed start.
    """
    import yaml

    from reprocess.core.ranges import OffsetRange
    from reprocess.formats.specs import parse_spec
    from reprocess.postgres.db import make_engine, migrate
    from reprocess.spark.connect import client_env, shared_session
    from reprocess.spark.job import warm_up as stage_warm_up

    pid = _unwarmed_server()
    if pid is None:
        return
    db_url = os.environ.get("AIRFLOW_CONN_REPROCESS_DB")
    try:
        kafka = _warm_up_topic()
    except Exception as exc:  # the broker is down or refuses: the server still serves
        print(f"spark-connect: no warm-up (Kafka: {exc})")
        return
    if not db_url:
        print("spark-connect: no warm-up (AIRFLOW_CONN_REPROCESS_DB is not set: source scripts/env.sh)")
        return
    raw = yaml.safe_load((jvm.POMS.parent.parent / "pipelines" / "orders.yaml").read_text())
    raw.update({"name": WARM_UP_TOPIC, "topics": [WARM_UP_TOPIC], "target_table": f"{WARM_UP_TOPIC}.orders"})
    spec = parse_spec(raw, source="devstack warm-up")
    ranges = [OffsetRange(WARM_UP_TOPIC, p, low, high) for p, (low, high) in kafka.items()]
    started = time.monotonic()
    try:
        engine = make_engine(db_url)
        migrate(engine)  # the stage path's bookkeeping tables (a fresh clone's database has none yet)
        engine.dispose()
        with client_env(), shared_session(url()) as spark:
            rows = stage_warm_up(spark, spec, ranges, db_url, _kafka_config())
    except Exception as exc:  # the first run will say what is wrong, with its own context
        print(f"spark-connect: warm-up failed ({str(exc).splitlines()[0][:300]}); the first run will be cold")
        return
    warmed_file().write_text(str(pid))
    print(f"spark-connect: warmed up in {time.monotonic() - started:.1f} s ({rows} stage rows)")


def warm_up_in_background() -> None:
    """:func:`warm_up` in a process of its own, so ``make services`` returns at once: on this shared
    2-core machine the warm-up took 55 s at load 14-18 (its fixed costs, not its ~11,000 records).
    A run started meanwhile shares the work. Its output: ``<state>/connect/warm-up.log``."""
    if _unwarmed_server() is None or pid_alive(warm_up_pidfile()) is not None:
        return  # warm, or a warm-up is under way
    code = "from devstack import connect; connect.warm_up()"
    spawn([sys.executable, "-c", code], home() / "warm-up.log", warm_up_pidfile(), os.environ, cwd=home())
    print(f"spark-connect: warming up in the background (log {home() / 'warm-up.log'})")


def _kafka_config() -> dict[str, object]:
    from reprocess.airflow.hooks import KafkaConfigHook

    return KafkaConfigHook().client_config()


# A broker that has just started answers for a few seconds that it leads no partition yet (it is
# still loading its logs): the warm-up waits that out instead of leaving the first run cold.
LEADERSHIP_WAIT_S: Final = 30.0


def _warm_up_topic() -> dict[int, tuple[int, int]]:
    """The warm-up topic's (log start, log end) per partition, produced on first use."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from reprocess.kafka.clients import make_consumer
    from reprocess.kafka.demo_data import create_topic, order_events, produce

    not_led_yet = {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    kafka = _kafka_config()
    create_topic(kafka, WARM_UP_TOPIC, 2)
    consumer = make_consumer(kafka)
    try:

        def ends() -> dict[int, tuple[int, int]]:
            deadline = time.monotonic() + LEADERSHIP_WAIT_S
            while True:
                try:
                    return {
                        p: consumer.get_watermark_offsets(TopicPartition(WARM_UP_TOPIC, p), timeout=10, cached=False)
                        for p in (0, 1)
                    }
                except KafkaException as exc:
                    if exc.args[0].code() not in not_led_yet or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

        found = ends()
        if all(high == 0 for _, high in found.values()):
            produce(kafka, WARM_UP_TOPIC, 2, order_events(WARM_UP_ORDERS, 10))
            found = ends()
    finally:
        consumer.close()
    return found


def stop() -> None:
    print("spark-connect: stopped" if connect_server.stop(server()) else "spark-connect: not running")


def kill() -> None:
    """SIGKILL the server and its Python workers: a crash (the fault tests)."""
    import signal

    stop_pid(pidfile(), "spark-connect", grace=5, sig=signal.SIGKILL)


def status() -> str:
    return f"running at {url()}" if running() else "stopped"
