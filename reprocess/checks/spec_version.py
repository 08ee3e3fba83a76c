"""Spec version: rows of the window derived by an older spec version than the live one."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from reprocess.checks.base import Query, Window
from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.postgres.evolve import stale_in_ranges


def _spec_versions(window: Window) -> dict[TopicPartition, str]:
    """Per partition, postgres.evolve.stale_message's text (none when no row is stale), in one pass."""
    return stale_in_ranges(window.conn, window.spec, window.ranges)


SPEC_VERSIONS: Final = Query("spec versions", _spec_versions, "")


class SpecVersion:
    kind: Final = "spec version"
    query: Final = SPEC_VERSIONS

    def detail(self, result: str) -> str | None:
        return result or None

    def heal(self, result: str, window: OffsetRange, left_out: Collection[str]) -> OffsetRange | None:
        return window  # a backfill of the window re-derives them


CHECK: Final = SpecVersion()
