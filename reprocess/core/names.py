"""The shapes of the names a run derives: its batches' run ids.

A batched run ``r`` commits batch k as a child run ``r#k``; everything that builds or parses such
a name calls these.
"""

from __future__ import annotations

from typing import Final

BATCH_SEPARATOR: Final = "#"


def child_run_id(run_id: str, k: int) -> str:
    """Batch ``k``'s run id.

    >>> child_run_id("orders-backfill/manual__1", 2)
    'orders-backfill/manual__1#2'
    """
    return f"{run_id}{BATCH_SEPARATOR}{k}"


def parent_run_id(run_id: str) -> str:
    """The run a batch belongs to (a run that is no batch is its own).

    >>> parent_run_id("orders-backfill/manual__1#2"), parent_run_id("orders-backfill/manual__1")
    ('orders-backfill/manual__1', 'orders-backfill/manual__1')
    """
    return run_id.split(BATCH_SEPARATOR, 1)[0]
