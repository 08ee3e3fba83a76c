"""Mirror committed positions to the Kafka consumer group, after the Postgres commit.

Postgres is the source of truth; the mirror lets ``kafka-consumer-groups`` and lag tools see
the pipeline's progress. It is idempotent (it writes the ledger's values) and a failure never
undoes the Postgres commit: the task fails and Airflow retries it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from reprocess.core.errors import OffsetLookupError
from reprocess.core.spec import PipelineSpec
from reprocess.postgres.ledger import ledger_positions

log = logging.getLogger(__name__)


def mirror_group_offsets(engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec) -> dict[str, int]:
    """Write the ledger's next offsets to the spec's consumer group; returns what was written.

    A synchronous commit from a consumer that never joins the group (no ``subscribe()``)
    works on an empty group, which is the state a batch pipeline's group is in.
    """
    from confluent_kafka import KafkaException, TopicPartition

    from reprocess.kafka.clients import make_consumer

    with engine.connect() as conn:
        positions = ledger_positions(conn, spec.name)
    if not positions:
        return {}
    consumer = make_consumer({**kafka, "group.id": spec.consumer_group})
    try:
        result = consumer.commit(
            offsets=[TopicPartition(p.topic, p.partition, offset) for p, offset in positions.items()],
            asynchronous=False,
        )
    except KafkaException as exc:
        raise OffsetLookupError(
            f"{spec.name}: mirroring offsets to group {spec.consumer_group} failed: {exc}. The Postgres commit "
            "stands; the task retries the mirror.",
            pipeline=spec.name,
        ) from exc
    finally:
        consumer.close()
    failed = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in result or [] if tp.error]
    if failed:
        raise OffsetLookupError(
            f"{spec.name}: mirror to group {spec.consumer_group} failed for {', '.join(failed)}", pipeline=spec.name
        )
    written = {f"{p.topic}[{p.partition}]": offset for p, offset in positions.items()}
    log.info("mirror pipeline=%s group=%s offsets=%s", spec.name, spec.consumer_group, written)
    return written
