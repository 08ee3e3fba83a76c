"""``python -m devstack.jvm [set…]``: fetch the jar sets (all by default); what ``make install`` runs."""

import sys

from devstack.jvm import main

sys.exit(main())
