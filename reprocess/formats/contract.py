"""The decoder contract every format keeps, so the stage shape (:mod:`reprocess.spark.transform`)
never depends on the format.

A decoder takes Spark's Kafka records (``key``, ``value``, ``topic``, ``partition``, ``offset``,
``timestamp``) and returns them with, for the spec's ``i``-th column, its typed value in
:func:`typed_name` ``(i)``; with ``tombstones: delete``, for the ``i``-th key column, the value a
tombstone's Kafka key gives it in :func:`key_name` ``(i)``; and ``_error``: NULL for a good record
or a tombstone, else the first problem, which makes the record a dead letter.
"""

from __future__ import annotations


def typed_name(i: int) -> str:
    """The column holding the typed value of the spec's ``i``-th column."""
    return f"_t_{i}"


def key_name(i: int) -> str:
    """The column holding a tombstone's value of the spec's ``i``-th key column."""
    return f"_k_{i}"
