"""The options of Spark's own Kafka source (``spark.read.format("kafka")``) for a bounded read.

Every read of a run (backfill, incremental, reconciliation window, rebuild, redrive) is one
batch read of planned ``[start, end)`` ranges through the JVM connector
``spark-sql-kafka-0-10``. This module builds its option map and nothing else (no pyspark
import): the ranges as per-partition JSON, read_committed, ``failOnDataLoss=true`` (the job
turns the failure into the product's :class:`~reprocess.core.errors.DataLossError`),
headers, and the ``kafka_default`` connection's client settings as ``kafka.*`` options.

The connection holds a librdkafka config (planning, the mirror and the tests use
confluent-kafka with it), while the Spark source runs the Java client. :func:`java_client_config`
translates the settings the two spell differently, drops the ones the reader sets itself or
that only a producer reads, and refuses the rest with the fix: a ``java.<name>`` key in the
connection goes to the Java client only (confluent-kafka never sees it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from reprocess.core.errors import ConnectionConfigError, SpecError
from reprocess.core.ranges import OffsetRange, offsets_json
from reprocess.kafka.clients import JAVA_PREFIX, require_bootstrap

# Spelled the same by librdkafka and the Java client, and meaningful to a consumer.
SAME_NAME: Final = frozenset(
    {
        "bootstrap.servers", "client.id", "client.rack", "security.protocol", "sasl.mechanism",
        "sasl.kerberos.service.name", "ssl.key.password", "ssl.keystore.location", "ssl.keystore.password",
        "ssl.cipher.suites", "fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes",
        "reconnect.backoff.ms", "reconnect.backoff.max.ms", "retry.backoff.ms", "retry.backoff.max.ms",
        "metadata.max.age.ms", "connections.max.idle.ms", "request.timeout.ms", "socket.connection.setup.timeout.ms",
    }
)  # fmt: skip
RENAMED: Final[Mapping[str, str]] = {
    "sasl.mechanisms": "sasl.mechanism",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "socket.receive.buffer.bytes": "receive.buffer.bytes",
    "socket.send.buffer.bytes": "send.buffer.bytes",
}
# Set by the reader (Spark's source forbids or manages them), or read by producers only.
NOT_FOR_THE_READER: Final = frozenset(
    {
        "group.id", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "isolation.level",
        "enable.partition.eof", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
        "enable.idempotence", "acks", "linger.ms", "queue.buffering.max.ms", "batch.size", "batch.num.messages",
        "compression.type", "compression.codec", "transactional.id", "transaction.timeout.ms",
        "message.timeout.ms", "delivery.timeout.ms", "log_level", "debug", "statistics.interval.ms",
    }
)  # fmt: skip
_JAAS_MODULES: Final[Mapping[str, str]] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

# The source waits this long per partition fetch for data; with many small ranges the 500 ms
# default dominates (measured: 200 partitions x 20 records 53 s, with 10 ms 4.7 s).
FETCH_MAX_WAIT_MS: Final = "10"
# Spark's source opens a new Java consumer for every topic partition it reads (its consumer pool is
# keyed by the query's own group id), so a wide topic pays a consumer's set-up per partition. Two
# parts of it serve monitoring of long-lived consumers, not a bounded read: the KIP-714 metrics
# push (a telemetry request and a metrics ledger per consumer) and the JMX registration of every
# metric. Off by default (measured: 1,000 partitions x 21 records, read alone, 3 alternating pairs,
# load 11-15: 22.9-38.3 s with them, 17.7-25.9 s without); a connection's
# java.enable.metrics.push / java.auto.include.jmx.reporter turns them back on.
PER_PARTITION_CONSUMER: Final[Mapping[str, str]] = {
    "enable.metrics.push": "false",
    "auto.include.jmx.reporter": "false",
}
# A fetch that brings nothing for this long fails the task. Spark's default (spark.network.timeout,
# 120 s) is how long an end above the last stable offset would hang before failing; 60 s still
# outlasts a broker restart (~5 s here).
POLL_TIMEOUT_MS: Final = "60000"


def _jaas(mechanism: str, username: str, password: str) -> str:
    module = _JAAS_MODULES.get(mechanism.upper())
    if module is None:
        raise ConnectionConfigError(
            f"kafka_default: sasl.username/sasl.password with sasl.mechanism {mechanism!r} cannot be given to "
            f"Spark's Kafka source; use {', '.join(_JAAS_MODULES)} or set 'java.sasl.jaas.config' in the "
            "connection's extra"
        )
    quoted = [json.dumps(x) for x in (username, password)]  # JAAS strings are double-quoted, \-escaped
    return f"{module} required username={quoted[0]} password={quoted[1]};"


def java_client_config(config: Mapping[str, Any]) -> dict[str, str]:
    """The Java Kafka client's config for a librdkafka ``config`` (the ``kafka_default`` extra).

    Examples
    --------
    >>> java_client_config({"bootstrap.servers": "b:9092", "group.id": "g", "sasl.mechanisms": "PLAIN",
    ...     "sasl.username": "u", "sasl.password": 'p"w', "ssl.ca.location": "/ca.pem",
    ...     "ssl.endpoint.identification.algorithm": "none", "java.ssl.truststore.type": "JKS"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'bootstrap.servers': 'b:9092', 'sasl.mechanism': 'PLAIN', 'ssl.truststore.location': '/ca.pem',
     'ssl.truststore.type': 'JKS', 'ssl.endpoint.identification.algorithm': '',
     'sasl.jaas.config': 'org.apache.kafka.common.security.plain.PlainLoginModule required
     username="u" password="p\\\\"w";'}
    >>> java_client_config({"bootstrap.servers": "b:9092", "enable.ssl.certificate.verification": "false"})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reprocess.core.errors.ConnectionConfigError: kafka_default: 'enable.ssl.certificate.verification' is a ...
    """
    out: dict[str, str] = {}
    java_only: dict[str, str] = {}
    for key, value in config.items():
        if key.startswith(JAVA_PREFIX):
            java_only[key[len(JAVA_PREFIX) :]] = str(value)
        elif key in SAME_NAME:
            out[key] = str(value)
        elif key in RENAMED:
            out[RENAMED[key]] = str(value)
        elif key == "ssl.ca.location":  # a PEM file: the Java client reads PEM trust stores (KIP-651)
            out["ssl.truststore.location"] = str(value)
            out["ssl.truststore.type"] = "PEM"
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = "" if str(value).lower() == "none" else str(value)
        elif key in ("sasl.username", "sasl.password") or key in NOT_FOR_THE_READER:
            continue
        else:
            raise ConnectionConfigError(
                f"kafka_default: {key!r} is a librdkafka setting that Spark's Kafka source (the Java client) has "
                f"no known equivalent for. Remove it from the connection's extra, or add the Java client's own "
                f"setting as '{JAVA_PREFIX}<name>' (given to Spark's reader only; "
                "https://kafka.apache.org/documentation/#consumerconfigs)"
            )
    if "sasl.username" in config or "sasl.password" in config:
        mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI")))
        out["sasl.jaas.config"] = _jaas(mechanism, str(config.get("sasl.username", "")),
                                        str(config.get("sasl.password", "")))  # fmt: skip
    require_bootstrap(out)
    return {**out, **java_only}


def read_options(config: Mapping[str, Any], ranges: Iterable[OffsetRange], *, headers: bool = True) -> dict[str, str]:
    """The option map of ``spark.read.format("kafka")`` that reads exactly ``ranges``.

    ``assign`` names the partitions and the per-partition JSON offsets bound the read; ends must
    not lie above the last stable offset (planning snapshots them with read_committed), else
    the source waits ``POLL_TIMEOUT_MS`` and fails as data loss. ``headers``: whether the records
    carry their headers. The source generates each partition's row converter anew, and the
    headers' part of it (an array of structs) is most of that code: a pipeline that reads no
    header should not pay it per partition.

    Examples
    --------
    >>> opts = read_options({"bootstrap.servers": "b:1"}, [OffsetRange("t", 1, 3, 9), OffsetRange("t", 0, 0, 4)])
    >>> opts["assign"], opts["startingOffsets"], opts["endingOffsets"]
    ('{"t": [0, 1]}', '{"t": {"0": 0, "1": 3}}', '{"t": {"0": 4, "1": 9}}')
    >>> opts["kafka.isolation.level"], opts["failOnDataLoss"], opts["includeHeaders"]
    ('read_committed', 'true', 'true')
    >>> read_options({"bootstrap.servers": "b:1"}, [OffsetRange("t", 0, 0, 4)], headers=False)["includeHeaders"]
    'false'
    >>> opts["kafka.enable.metrics.push"], read_options({"bootstrap.servers": "b:1",
    ...     "java.enable.metrics.push": "true"}, [OffsetRange("t", 0, 0, 4)])["kafka.enable.metrics.push"]
    ('false', 'true')
    """
    ranges = sorted(ranges)
    if not ranges:
        raise SpecError("a Kafka read needs at least one range")
    assign: dict[str, list[int]] = {}
    for r in ranges:
        assign.setdefault(r.topic, []).append(r.partition)
    options = {f"kafka.{k}": v for k, v in java_client_config(config).items()}
    options.setdefault("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
    for name, value in PER_PARTITION_CONSUMER.items():
        options.setdefault(f"kafka.{name}", value)
    options.update(
        {
            "assign": json.dumps(assign),
            "startingOffsets": offsets_json(ranges, "start"),
            "endingOffsets": offsets_json(ranges, "end"),
            "kafka.isolation.level": "read_committed",
            "failOnDataLoss": "true",
            "includeHeaders": str(headers).lower(),
            "kafkaConsumer.pollTimeoutMs": POLL_TIMEOUT_MS,
        }
    )
    return options
