"""Lag as a tool no one here wrote sees it: Apache Kafka's own ``kafka-consumer-groups --describe``
against ``reprocess status``, on the consumer group the commit mirrors the ledger to.

A backfill ends at chosen offsets, so every partition keeps a lag the test knows in advance: the
oracle is the producer's own delivery reports (log ends) minus those offsets, and both tools must
print exactly it. (LinkedIn's Burrow, the lag tool Debian ships, was tried too and cannot read an
Apache Kafka 4 cluster: docs/operations/status.md, "Lag in other tools".)
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from devstack import java, jvm
from reprocess.core.runs import EndMode, RunKind, RunRequest, StartMode
from reprocess.kafka import demo_data
from reprocess.operations.mirror import mirror_group_offsets
from tests.support.helpers import log_ends, orders_spec, plan_stage_commit

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def _kafka_consumer_groups(kafka: dict[str, Any], group: str) -> dict[tuple[str, int], dict[str, str]]:
    """``kafka-consumer-groups --describe --group G`` (the class behind the script, from the jars the
    broker runs on), its table as ``{(topic, partition): {column: value}}``."""
    home = java.java_home()
    assert home is not None, "Java 17 is needed: see docs/getting-started/index.md"
    out = subprocess.run(
        [str(home / "bin" / "java"), "-Xmx256m", "-cp", jvm.classpath("kafka"), GROUP_COMMAND,
         "--bootstrap-server", kafka["bootstrap.servers"], "--describe", "--group", group],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line.split() for line in out.stdout.splitlines() if line.strip()]
    header = next(i for i, cells in enumerate(lines) if cells[:2] == ["GROUP", "TOPIC"])
    columns = lines[header]
    rows = [dict(zip(columns, cells, strict=False)) for cells in lines[header + 1 :]]
    return {(row["TOPIC"], int(row["PARTITION"])): row for row in rows}


def test_kafka_consumer_groups_sees_the_lag_reprocess_status_prints(kafka_config, engine, unique_name):
    kafka, topic = kafka_config, unique_name
    spec = orders_spec(unique_name, topic)
    demo_data.create_topic(kafka, topic, 3)
    produced = demo_data.produce(kafka, topic, 3, demo_data.order_events(60, 3, seed=29), malformed=())
    ends = log_ends(produced)
    stops = {p: end // 2 for p, end in ends.items()}  # each partition keeps half its records unread
    request = RunRequest(RunKind.BACKFILL, StartMode.EARLIEST, EndMode.OFFSETS,
                         end_value=json.dumps({topic: {str(p): o for p, o in stops.items()}}))  # fmt: skip
    plan_stage_commit(engine, kafka, spec, request, f"{unique_name}-1")
    mirror_group_offsets(engine, kafka, spec)

    expected_lag = {p: ends[p] - stops[p] for p in ends}
    assert all(lag > 0 for lag in expected_lag.values())

    cli = subprocess.run(["reprocess", "status", spec.name, "--json"], capture_output=True, text=True, check=True)
    status = json.loads(cli.stdout)
    by_reprocess = {x["partition"]: x for x in status[0]["partitions"]}
    by_kafka = _kafka_consumer_groups(kafka, spec.consumer_group)

    assert set(by_kafka) == {(topic, p) for p in ends}
    for p in ends:
        kafka_row, ours = by_kafka[(topic, p)], by_reprocess[p]
        assert (int(kafka_row["CURRENT-OFFSET"]), int(kafka_row["LOG-END-OFFSET"]), int(kafka_row["LAG"])) == (
            stops[p],
            ends[p],
            expected_lag[p],
        ), kafka_row
        assert (ours["ledger"], ours["log_end"], ours["lag"]) == (stops[p], ends[p], expected_lag[p]), ours
    assert status[0]["lag"] == sum(expected_lag.values())
