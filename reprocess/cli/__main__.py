"""``python -m reprocess.cli``: the ``reprocess`` command."""

import sys

from reprocess.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
