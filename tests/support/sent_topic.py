"""A one-partition topic whose records a test sends one at a time and keeps for its oracle."""

from __future__ import annotations

import json
from typing import Any

from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer


class Topic:
    """Records sent one at a time (each send returns its offset), kept for the oracle."""

    def __init__(self, kafka: dict[str, Any], name: str) -> None:
        demo_data.create_topic(kafka, name, 1)
        self.name, self.producer, self.sent = name, make_producer(kafka), []

    def send(self, key: Any, value: dict[str, Any] | None) -> int:
        raw_key = key.encode() if isinstance(key, str) else json.dumps(key).encode()
        self.producer.produce(self.name, key=raw_key, value=None if value is None else json.dumps(value).encode())
        self.producer.flush()
        self.sent.append((key, value))
        return len(self.sent) - 1  # its offset
