"""``reprocess produce``: the demo topics, created and filled once (also the compose stack's demo producer).

``orders`` has 4 partitions of order events with several updates per order, malformed messages and
transactional batches that leave marker gaps; ``payments`` 2 partitions of versioned events, some
out of order. A second run changes nothing. Registered with the ``reprocess`` command through the
``reprocess.commands`` entry point group (pyproject.toml).
"""

from __future__ import annotations

import argparse
from typing import Final

from reprocess.cli.common import EXIT_OK, kafka_config
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_admin

NAME: Final = "produce"
SUMMARY: Final = "only create and fill the demo topics (no Airflow, no Spark)"
DESCRIPTION: Final = ""
EXAMPLES: Final = (("only create and fill the demo topics", "reprocess produce --orders 5000"),)
DEFAULT_ORDERS: Final = 20_000


def configure(cmd: argparse.ArgumentParser) -> None:
    add_orders_argument(cmd)


def add_orders_argument(cmd: argparse.ArgumentParser) -> None:
    """``--orders``, which ``demo`` takes too."""
    cmd.add_argument(
        "--orders", type=int, default=DEFAULT_ORDERS, help=f"distinct orders to produce (default {DEFAULT_ORDERS})"
    )


def run(args: argparse.Namespace) -> int:
    produce(args.orders)
    return EXIT_OK


def produce(orders: int) -> None:
    """The demo topics, created and filled once; prints what it produced."""
    for topic, count in ensure_demo_topics(orders).items():
        print(f"produced {count} messages to topic {topic}")


def ensure_demo_topics(orders: int, partitions: int = 4) -> dict[str, int]:
    """Create and fill ``orders`` and ``payments`` once; a second demo replays the same data."""
    kafka = kafka_config()
    existing = make_admin(kafka).list_topics(timeout=10).topics
    produced = {}
    if "orders" not in existing:
        demo_data.create_topic(kafka, "orders", partitions)
        events = demo_data.order_events(orders, 5)
        produced["orders"] = len(
            demo_data.produce(kafka, "orders", partitions, events, transactional_every=5_000).messages
        )
    if "payments" not in existing:
        demo_data.create_topic(kafka, "payments", 2)
        events = demo_data.payment_events(max(1, orders // 4))
        produced["payments"] = len(demo_data.produce(kafka, "payments", 2, events, malformed=()).messages)
    return produced
