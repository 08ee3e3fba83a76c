"""Kafka clients built in one place, with the safe defaults this pipeline relies on.

Callers pass a plain librdkafka config (from the Airflow ``kafka_default`` connection); this
module adds the settings a bounded, exactly-once read needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from reprocess.core.errors import ConnectionConfigError

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

KafkaConfig = Mapping[str, Any]
# Connection keys for the Java client only (Spark's Kafka source); confluent-kafka never sees them.
JAVA_PREFIX: Final = "java."


def probe_brokers(config: KafkaConfig, timeout: float = 3.0) -> str:
    """Why no broker answered, in the words of a plain TCP connect to each ``bootstrap.servers``
    entry ("127.0.0.1:19099 connection refused"); empty when all accept one (the fault is then Kafka's
    own: TLS/SASL settings, advertised listeners). librdkafka's error says only "transport failure"."""
    return "; ".join(_refusals(config, timeout)[1])


def no_broker_answers(config: KafkaConfig, timeout: float = 3.0) -> str:
    """Why no ``bootstrap.servers`` entry accepts a TCP connect (:func:`probe_brokers`'s words);
    empty when one does. A client would retry them until its request times out."""
    servers, reasons = _refusals(config, timeout)
    return "; ".join(reasons) if servers and len(reasons) == len(servers) else ""


def _refusals(config: KafkaConfig, timeout: float) -> tuple[list[str], list[str]]:
    """The bootstrap servers, and the reason of each one a TCP connect failed on."""
    import socket

    servers = [s.strip() for s in str(config.get("bootstrap.servers") or "").split(",") if s.strip()]
    reasons = []
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except (OSError, ValueError) as exc:
            reasons.append(f"{server} {getattr(exc, 'strerror', None) or exc}".rstrip().lower())
    return servers, reasons


def librdkafka_config(config: KafkaConfig) -> dict[str, Any]:
    """``config`` without its ``java.*`` keys, which only Spark's Kafka source (the Java client) reads
    (``reprocess.kafka.spark_source``)."""
    return {k: v for k, v in config.items() if not k.startswith(JAVA_PREFIX)}


def require_bootstrap(config: KafkaConfig) -> None:
    """Every Kafka client config names its brokers: the connection's one required key."""
    if not config.get("bootstrap.servers"):
        raise ConnectionConfigError("Kafka config must set 'bootstrap.servers' (connection extra of kafka_default)")


def make_consumer(config: KafkaConfig) -> Consumer:
    """A consumer for ``assign()``-based bounded reads; it never joins a group or commits."""
    from confluent_kafka import Consumer

    return Consumer(consumer_config(config))


def consumer_config(config: KafkaConfig) -> dict[str, Any]:
    """The librdkafka settings of :func:`make_consumer`, inspectable without a broker."""
    require_bootstrap(config)
    conf = {
        **librdkafka_config(config),
        # Offsets live in Postgres (the ledger); the Kafka group is only a mirror.
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Records of open or aborted transactions must not reach the target.
        "isolation.level": "read_committed",
        # EOF is our end-of-range signal when a range ends at the log end.
        "enable.partition.eof": True,
        # A range below the log start is data loss; never jump silently.
        "auto.offset.reset": "error",
    }
    conf.setdefault("group.id", "reprocess-reader")  # required by librdkafka, never joined
    return conf


def committed_offsets(
    config: KafkaConfig, group: str, partitions: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """``group``'s committed offset per ``(topic, partition)`` that has one, asked by a consumer of
    the group (it never joins it). Not the admin API: librdkafka 2.16's AdminClient crashes the
    process (SIGSEGV in rd_kafka_cgrp_op) when a ListConsumerGroupOffsets answer carries an error,
    as while the coordinator reloads after a broker restart (a core dump of test_broker_restart
    showed it). Raises ``KafkaException`` when the broker does not answer."""
    from confluent_kafka import TopicPartition

    consumer = make_consumer({**config, "group.id": group})
    try:
        answer = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=30)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in answer if tp.error is None and tp.offset >= 0}


def make_admin(config: KafkaConfig) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    require_bootstrap(config)
    return AdminClient({k: v for k, v in librdkafka_config(config).items() if k not in _CONSUMER_ONLY})


def make_producer(config: KafkaConfig, **overrides: Any) -> Producer:
    from confluent_kafka import Producer

    require_bootstrap(config)
    conf = {k: v for k, v in librdkafka_config(config).items() if k not in _CONSUMER_ONLY}
    # Idempotence keeps retried sends from duplicating records.
    conf.setdefault("enable.idempotence", True)
    conf.update(overrides)
    return Producer(conf)


_CONSUMER_ONLY = frozenset({"group.id", "auto.offset.reset", "enable.auto.commit", "isolation.level"})
