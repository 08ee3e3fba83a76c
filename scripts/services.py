#!/usr/bin/env python3
"""Start, stop and check the embedded services (PostgreSQL, the broker, the Spark Connect server).

A thin wrapper: the services live in the ``devstack`` package (``python -m devstack.cli``).
"""

import sys

from devstack.cli import main

if __name__ == "__main__":
    sys.exit(main())
