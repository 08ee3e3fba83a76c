#!/usr/bin/env python3
"""The long life of a CDC table, counted per key against the source table: see :mod:`bench.cdc_life`.

A thin wrapper: ``source scripts/env.sh && python scripts/cdc_life.py --seed 36`` (or ``python -m bench.cdc_life``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the bench package lives beside scripts/

from bench.cdc_life import main

if __name__ == "__main__":
    sys.exit(main())
