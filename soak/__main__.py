import sys

from soak.cli import main

sys.exit(main())
