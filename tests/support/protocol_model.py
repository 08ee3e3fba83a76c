"""A plain-Python model of what committed runs must leave in Postgres (imports nothing from reprocess).

The model is the contract, written from DESIGN §2 rather than from the code: per key, the
target holds the newest COMMITTED record (a tombstone leaves no row but a deletion marker with
its lineage), whatever order the runs committed in; dead letters are every dead record of a
committed range, stored once; the ledger holds the next offset per partition and moves forward
only across contiguous ranges (a first commit on a partition sets it to the range's end).

"Newest": with offset ordering, the later offset (keys never change partition in the model's
log); with version ordering, the higher version, ties going to the later offset within a
partition and to the higher partition across partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["row", "tombstone", "dead"]


@dataclass(frozen=True)
class LogRecord:
    partition: int
    offset: int
    kind: Kind
    key: str
    value: str
    version: int


@dataclass
class ProtocolModel:
    by_version: bool
    newest: dict[str, LogRecord] = field(default_factory=dict)
    dead: set[tuple[int, int]] = field(default_factory=set)
    ledger: dict[int, int] = field(default_factory=dict)

    def _rank(self, r: LogRecord) -> tuple[int, ...]:
        return (r.version, r.partition, r.offset) if self.by_version else (r.partition, r.offset)

    def commit(self, ranges: dict[int, tuple[int, int]], log: dict[int, list[LogRecord]]) -> None:
        """A committed run read ``[start, end)`` of each partition in ``ranges``."""
        for partition, (start, end) in ranges.items():
            for r in log[partition][start:end]:
                if r.kind == "dead":
                    self.dead.add((r.partition, r.offset))
                elif r.key not in self.newest or self._rank(self.newest[r.key]) < self._rank(r):
                    self.newest[r.key] = r
            position = self.ledger.get(partition)
            if position is None or start <= position < end:
                self.ledger[partition] = end

    def fenced(self, starts: dict[int, int]) -> bool:
        """An incremental run planned from ``starts`` must find the ledger still there."""
        return any(p in self.ledger and self.ledger[p] != s for p, s in starts.items())

    def target(self) -> dict[str, tuple[str, int, int]]:
        """key → (value, partition, offset) of the rows the target must hold."""
        return {k: (r.value, r.partition, r.offset) for k, r in self.newest.items() if r.kind == "row"}

    def markers(self) -> dict[str, tuple[int, int]]:
        """key → (partition, offset) of the deletion markers."""
        return {k: (r.partition, r.offset) for k, r in self.newest.items() if r.kind == "tombstone"}
