"""The command line of ``make bench`` (``python -m bench``): which cases run, at what size.

Usage: ``python -m bench [--records N] [--scale] [--airflow] [--big] [--formats] [--no-peers]
[--no-concurrency] [--partitions P] [--left-out V] [--change-cost [--change-rows R]]``.
"""

from __future__ import annotations

import argparse

from bench.concurrency import LEVELS
from bench.data import UPDATES_PER_KEY
from bench.figures import BIG, PER_PARTITION


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="produce the data, run every case once, print and record one table"
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="N, records per main case (default 1,000,000)")
    parser.add_argument("--scale", action="store_true", help="also run the product at N/10 and 3N")
    parser.add_argument("--airflow", action="store_true", help="also time a 1,000-record backfill through Airflow")
    parser.add_argument(
        "--big", action="store_true", help=f"also run the product at {BIG:,} records (peak RSS) and reconcile them"
    )
    parser.add_argument("--formats", action="store_true", help="also run the product on N events as avro and debezium")
    parser.add_argument(
        "--no-peers",
        dest="peers",
        action="store_false",
        help="skip the Debezium JDBC sink (on the JSON rows and on change events), the Spark AvailableNow job and the "
        "Flink job",
    )
    parser.add_argument(
        "--no-concurrency",
        dest="concurrency",
        action="store_false",
        help=f"skip k = {', '.join(map(str, LEVELS))} concurrent runs of N/4 records",
    )
    parser.add_argument(
        "--partitions", type=int, default=0, metavar="P",
        help=f"also run the product over P partitions x {PER_PARTITION} records (the many-partitions case)",
    )  # fmt: skip
    parser.add_argument(
        "--left-out", type=int, default=1_000_000, metavar="V",
        help="the Debezium left-out case: V incomplete and V moved values seeded (default 10^6; 0 skips it)",
    )  # fmt: skip
    parser.add_argument(
        "--change-cost", action="store_true",
        help="also time an incremental into a big target ÷ an empty one and a window on 1,000 ÷ 10 partitions",
    )  # fmt: skip
    parser.add_argument("--change-rows", type=int, default=BIG, metavar="R",
                        help=f"rows the --change-cost targets hold (default {BIG:,})")  # fmt: skip
    parser.add_argument("--no-docs", dest="docs", action="store_false", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--keep-topics", action="store_true", help="keep the bench_ topics (default: delete)")
    args = parser.parse_args(argv)
    if args.records < UPDATES_PER_KEY:
        parser.error("--records must be at least 10")
    return args
