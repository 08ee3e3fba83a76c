"""The JSON producers: each writes its topic without pause (a few thousand records a minute) and
keeps every record the broker acknowledged, with its partition and offset, in a JSON-lines file:
the oracle's only input for that topic (:mod:`soak.oracle`).

``orders`` (offset ordering): status changes of a few thousand orders, tombstones that delete an
order, malformed records. ``payments`` (version ordering): increasing versions per payment, late
older versions (which must lose) and replays of the current one, malformed records.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any, Final

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

KEYS: Final = 3_000
MALFORMED: Final = (b"{not json", b'{"payment_id": 7, "status": ', b"\xff\xfe binary", b"[1, 2, 3]")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


class JsonProducer(threading.Thread):
    """One topic's producer thread; :meth:`stop` ends it after every record is acknowledged."""

    def __init__(self, bootstrap: str, topic: str, kind: str, per_minute: int, log: Path, seed: int) -> None:
        super().__init__(name=f"produce-{topic}", daemon=True)
        self.topic, self.kind, self.per_minute, self.log = topic, kind, per_minute, log
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.sent = self.acked = self.failed = 0
        self.versions: dict[str, int] = {}
        self.seq = 0
        # Idempotent, acks=all, retried for ten minutes: a broker down for seconds loses nothing.
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "delivery.timeout.ms": 600_000, "linger.ms": 20, "log_level": 3})  # fmt: skip
        self._out = log.open("a")
        self._lock = threading.Lock()

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def run(self) -> None:
        interval = 60.0 / self.per_minute
        next_at = time.monotonic()
        while not self.stopping.is_set():
            key, value = self.record()
            self._send(key, value)
            next_at += interval
            self.producer.poll(0)
            time.sleep(max(0.0, next_at - time.monotonic()))
        while self.producer.flush(5) > 0:
            pass
        self._out.close()

    def _send(self, key: str | None, value: bytes | None) -> None:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.failed += 1
                return
            with self._lock:
                self.acked += 1
                line = {"p": msg.partition(), "o": msg.offset(), "k": key,
                        "v": None if value is None else value.decode("utf-8", "replace"),
                        "bad": value is not None and value in MALFORMED}  # fmt: skip
                self._out.write(json.dumps(line) + "\n")

        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key.encode() if key else None, on_delivery=delivered)
                self.sent += 1
                return
            except BufferError:  # queue full while the broker is down: wait for room
                self.producer.poll(0.5)

    def record(self) -> tuple[str | None, bytes | None]:
        """The next (key, value): mostly good records, some malformed, some tombstones or late versions."""
        roll = self.rng.random()
        if roll < 0.01:
            return None, self.rng.choice(MALFORMED)
        self.seq += 1
        if self.kind == "orders":
            key = f"order-{self.rng.randrange(KEYS)}"
            if roll < 0.05:
                return key, None  # a tombstone: the order is deleted
            status = self.rng.choice(["new", "paid", "shipped", "done", "refunded"])
            value = {"order_id": key, "status": status, "amount": f"{self.rng.randrange(1, 10**6) / 100:.2f}",
                     "seq": self.seq}  # fmt: skip
            return key, json.dumps(value).encode()
        key = f"pay-{self.rng.randrange(KEYS)}"
        current = self.versions.get(key, 0)
        if roll < 0.12 and current > 1:
            version = current - self.rng.randint(1, min(3, current - 1))  # late: an older version arrives now
        else:
            version = current + 1
            self.versions[key] = version
        value = {"payment_id": key, "status": f"s{version}", "amount": f"{version * 1.5:.2f}", "version": version}
        return key, json.dumps(value).encode()
