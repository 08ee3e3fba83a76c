#!/usr/bin/env python3
"""Start, stop and check the Airflow UI (``airflow standalone``): ``make up`` / ``make down``.

A thin wrapper around ``devstack.airflow_ui``.
"""

import sys

from devstack.airflow_ui import main

if __name__ == "__main__":
    sys.exit(main())
