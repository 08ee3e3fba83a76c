"""The options of Spark's Kafka source and the translation of its data-loss failure (no services)."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest

from reprocess.core.errors import ConnectionConfigError, DataLossError
from reprocess.core.ranges import OffsetRange
from reprocess.kafka.clients import consumer_config, make_admin
from reprocess.kafka.spark_source import java_client_config, read_options
from reprocess.spark import read
from reprocess.spark.conf import PACKAGES

REPO = Path(__file__).resolve().parents[3]

# Spark's text for KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE as a Connect client receives it
# (Spark 4.2.0, seen on this machine: delete_records below a planned start).
SPARK_SAYS = """(org.apache.spark.sql.kafka010.KafkaIllegalStateException) Some data may have been lost because \
they are not available in Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.
Reason: Could not read records in offset [2, 10) for topic partition my-topic-0
with consumer group spark-kafka-relation-51ba13b1-eda9-49dc-b303-c7c910723971-executor.

JVM stacktrace:
org.apache.spark.sql.kafka010.KafkaIllegalStateException"""


def test_the_cluster_packages_are_the_coordinates_the_local_jars_are_fetched_from():
    pom = (REPO / "devstack" / "jvm" / "spark" / "pom.xml").read_text()
    version = re.search(r"<spark.version>([^<]+)</spark.version>", pom)
    assert version is not None
    for coordinate in PACKAGES:
        group, artifact, pinned = coordinate.split(":")
        assert pinned == version.group(1), coordinate
        assert f"<groupId>{group}</groupId><artifactId>{artifact}</artifactId>" in pom, coordinate


def test_security_settings_become_the_java_clients():
    password = secrets.token_hex(8)  # any value: the test needs none of its own
    conf = java_client_config(
        {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
         "sasl.username": "svc", "sasl.password": password, "ssl.ca.location": "/etc/ca.pem"}
    )  # fmt: skip
    assert conf == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.truststore.location": "/etc/ca.pem",
        "ssl.truststore.type": "PEM",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" '
        f"password={json.dumps(password)};",
    }


def test_a_librdkafka_only_setting_is_refused_with_the_fix():
    with pytest.raises(ConnectionConfigError, match=re.escape("'java.<name>'")) as refused:
        java_client_config({"bootstrap.servers": "b:1", "ssl.certificate.location": "/c.pem"})
    assert "'ssl.certificate.location' is a librdkafka setting" in str(refused.value)
    with pytest.raises(ConnectionConfigError, match="GSSAPI"):
        java_client_config({"bootstrap.servers": "b:1", "sasl.mechanism": "GSSAPI", "sasl.username": "u"})


def test_java_keys_reach_the_java_client_only():
    config = {"bootstrap.servers": "b:1", "java.ssl.keystore.type": "PKCS12", "group.id": "g"}
    assert java_client_config(config) == {"bootstrap.servers": "b:1", "ssl.keystore.type": "PKCS12"}
    assert "java.ssl.keystore.type" not in consumer_config(config)
    make_admin(config)  # confluent-kafka refuses an unknown key: this would raise


def test_the_read_options_bound_the_read_and_say_what_the_product_relies_on():
    ranges = [OffsetRange("orders", 1, 5, 9), OffsetRange("orders", 0, 0, 3), OffsetRange("refunds", 0, 2, 2)]
    opts = read_options({"bootstrap.servers": "b:1", "isolation.level": "read_uncommitted"}, ranges)
    assert json.loads(opts["assign"]) == {"orders": [0, 1], "refunds": [0]}
    assert json.loads(opts["startingOffsets"]) == {"orders": {"0": 0, "1": 5}, "refunds": {"0": 2}}
    assert json.loads(opts["endingOffsets"]) == {"orders": {"0": 3, "1": 9}, "refunds": {"0": 2}}
    assert opts["kafka.isolation.level"] == "read_committed"  # the connection cannot turn it off
    assert (opts["failOnDataLoss"], opts["includeHeaders"], opts["kafka.fetch.max.wait.ms"]) == ("true", "true", "10")
    assert "kafka.group.id" not in opts
    own_wait = read_options({"bootstrap.servers": "b:1", "fetch.wait.max.ms": 50}, ranges)
    assert own_wait["kafka.fetch.max.wait.ms"] == "50"


def test_sparks_data_loss_becomes_the_products_error_naming_the_lost_offsets(monkeypatch):
    planned = [OffsetRange("my-topic", 0, 2, 10), OffsetRange("my-topic", 1, 0, 10)]
    monkeypatch.setattr(read, "_watermarks", lambda kafka, r: (5, 10))
    lost = read.data_loss(RuntimeError(SPARK_SAYS), {}, planned)
    assert isinstance(lost, DataLossError)
    assert str(lost).startswith("my-topic[0]: offsets [2, 5) of the planned range [2, 10) are no longer in Kafka")
    assert "allow_data_loss=true" in str(lost)
    # The log start did not move: Spark's failure is still a loss the run must stop for.
    monkeypatch.setattr(read, "_watermarks", lambda kafka, r: (0, 10))
    other = read.data_loss(RuntimeError(SPARK_SAYS), {}, planned)
    assert isinstance(other, DataLossError) and "could not read the planned range [2, 10)" in str(other)
    assert read.data_loss(RuntimeError("java.lang.OutOfMemoryError: Java heap space"), {}, planned) is None


def test_the_compose_connect_server_gets_the_same_packages():
    compose = (REPO / "docker-compose.yml").read_text()
    assert f'"--packages", "{",".join(PACKAGES)}"' in compose
