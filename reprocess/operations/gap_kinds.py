"""The kinds of a reconciliation gap, labelled where gaps show (the calendar, ``reprocess status``,
the coverage page). A verdict stores one detail text per partition (reprocess.reconciliations);
each kind of gap it names starts with its own phrase (reconcile.PartitionVerdict.detail), so the
label is read from the text every stored verdict already has, old ones included
(tests/unit/test_gap_kinds.py checks each phrase against the detail reconcile writes)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# (label, the phrase of the detail that names it), in the order a detail lists them.
KINDS: Final = (
    ("uncovered", "uncovered offsets"),
    ("missing", "keys missing from the target"),
    ("older", "stale: "),
    ("dead letters unrecorded", "invalid records not in the dead letters"),
    ("spec version", "; current is v"),  # postgres.evolve.stale_message
    ("values differ", "rows differ from what their newest record derives"),
    ("values incomplete", "values incomplete"),
)


def gap_kinds(detail: str | None) -> tuple[str, ...]:
    """The labels of the gap kinds a verdict's detail names.

    >>> gap_kinds("3 rows differ from what their newest record derives (status ×3); e.g. …")
    ('values differ',)
    """
    return tuple(label for label, phrase in KINDS if phrase in (detail or ""))


def kind_counts(details: Iterable[str | None]) -> dict[str, int]:
    """Gap cells per kind label, in :data:`KINDS` order (the kinds no cell has left out)."""
    found = [gap_kinds(d) for d in details]
    counts = {label: sum(label in f for f in found) for label, _ in KINDS}
    return {label: n for label, n in counts.items() if n}
