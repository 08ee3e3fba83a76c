"""The checks a window's reconciliation runs, in the order a verdict's detail lists what they found
(see the package's docstring for how to add one)."""

from __future__ import annotations

from typing import Any, Final

from reprocess.checks import (
    coverage,
    dead_letters,
    missing_keys,
    older_rows,
    spec_version,
    values_differ,
    values_incomplete,
)
from reprocess.checks.base import Check

CHECKS: Final[tuple[Check[Any], ...]] = (
    coverage.CHECK,
    missing_keys.CHECK,
    older_rows.CHECK,
    dead_letters.CHECK,
    spec_version.CHECK,
    values_differ.CHECK,
    values_incomplete.CHECK,
)
KINDS: Final = tuple(c.kind for c in CHECKS)  # what reprocess.reconciliations.kinds holds, in this order


def kind_counts(kinds: list[tuple[str, ...]]) -> dict[str, int]:
    """Gaps per kind, in :data:`KINDS` order (kinds no gap has left out).

    >>> kind_counts([("missing",), ("missing", "values differ")])
    {'missing': 2, 'values differ': 1}
    """
    counts = {kind: sum(kind in k for k in kinds) for kind in KINDS}
    return {kind: n for kind, n in counts.items() if n}
