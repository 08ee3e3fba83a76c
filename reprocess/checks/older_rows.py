"""Older rows: keys whose target row (or deletion marker) is older, by the Ordering, than their newest
record of the window, or cannot be compared with it (a NULL ordering value)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from reprocess.checks.missing_keys import KEYS, KeyRows
from reprocess.core.ranges import OffsetRange


class OlderRows:
    kind: Final = "older"
    query: Final = KEYS

    def detail(self, result: KeyRows) -> str | None:
        if not result.stale:
            return None
        return (
            f"stale: {result.stale} keys whose target row is older than their newest record "
            f"(e.g. {', '.join(result.stale_examples)})"
        )

    def heal(self, result: KeyRows, window: OffsetRange, left_out: Collection[str]) -> OffsetRange | None:
        return window  # their records may lie anywhere in the window


CHECK: Final = OlderRows()
