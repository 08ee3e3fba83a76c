#!/usr/bin/env python3
"""``make cluster`` / ``make cluster-stop``: the local Spark standalone cluster (``devstack.standalone``)."""

from __future__ import annotations

import argparse
import shlex
import sys

from devstack import standalone
from devstack.process import ServiceError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop", "status"])
    action = parser.parse_args(argv).action
    try:
        if action == "start":
            standalone.start()
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in standalone.job_env().items())
            print(f"spark-cluster: to run the DAGs on it: export {exports}")
        elif action == "stop":
            standalone.stop()
        else:
            print(f"spark-cluster: {standalone.status()}")
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
