"""``python -m devstack.cli start|stop|status [service…]``: what ``make services``/``make stop`` run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from devstack import connect, java, kafka_connect, postgres, registry, standalone
from devstack.broker import Broker
from devstack.process import ServiceError

# Started only when named (by the tests that need them, or `make demo`); `stop` stops them too.
ON_DEMAND = ("kafka-connect", "registry")


def services() -> dict[str, tuple[Callable[[], None], Callable[[], None], Callable[[], bool]]]:
    """name → (start, stop, running), in start order (Postgres first, the Spark server and the
    on-demand services last)."""
    broker = Broker.default()
    return {
        "postgres": (postgres.start, postgres.stop, postgres.running),
        "kafka": (broker.start, broker.stop, broker.running),
        "spark-connect": (connect.start, connect.stop, connect.running),
        "kafka-connect": (kafka_connect.start, kafka_connect.stop, kafka_connect.running),
        "registry": (registry.start, registry.stop, registry.running),
    }


def service_logs() -> dict[str, list[Path]]:
    """service → its log files: what a failed test's report shows beside its error (scripts/test_report.py)."""
    return {
        "postgres": [postgres.log()],
        "kafka": [Broker.default().log],
        "spark-connect": [connect.log(), connect.server().warm_up_log],
        "kafka-connect": [kafka_connect.log()],
        "registry": [registry.log()],
        "spark-cluster": standalone.logs(),
    }


def main(argv: list[str] | None = None) -> int:
    known = services()
    parser = argparse.ArgumentParser(description="Start, stop and check the embedded services.")
    parser.add_argument("action", choices=["start", "stop", "status", "java"])
    parser.add_argument(
        "services", nargs="*", help=f"any of {', '.join(known)} (default: all; `start` skips {', '.join(ON_DEMAND)})"
    )
    args = parser.parse_args(argv)
    unknown = set(args.services) - set(known)
    if unknown:
        parser.error(f"unknown service(s) {sorted(unknown)}; choose from {list(known)}")
    names = args.services or [n for n in known if args.action != "start" or n not in ON_DEMAND]
    if args.action == "stop":
        names.reverse()
    try:
        if args.action == "java":
            java.check(install=True)
            return 0
        if args.action == "start":
            java.check(install=True)
            java.class_archive()
        for name in names:
            start, stop, running = known[name]
            if args.action == "start":
                start()
            elif args.action == "stop":
                stop()
            else:
                print(f"{name}: {'running' if running() else 'stopped'}")
        if args.action == "start" and "spark-connect" in names:
            connect.warm_up_in_background()  # after the broker and Postgres: the warm-up reads and stages
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
