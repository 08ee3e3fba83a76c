"""``python -m bench``: see :mod:`bench.cli`."""

import sys

from bench.cli import main

if __name__ == "__main__":  # importing it (an import check, a doc tool) must not start a benchmark
    sys.exit(main())
