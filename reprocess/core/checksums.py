"""Checksum bisection for the whole-table audit (issue 57 item 2), the engine-free part: how the key space is
cut into ranges, and which ranges differ.

A key's range is a prefix of the md5 of its canonical text (:mod:`reprocess.postgres.checksum_sql`,
:mod:`reprocess.spark.checksums`), so Spark and PostgreSQL put a key in the same range whatever its type and
the database's collation. Each side sums, per range, a 64-bit hash of every row's canonical text (key, values,
lineage) in two 32-bit halves, with the row count: sums add up, so a coarser range's checksum is the sum of
its finer ones (:func:`coarsen`), as data-diff/reladiff add up the segments they bisect. PostgreSQL sums the
target at the finest cut once; the cut the audit compares at is chosen from the table's size
(:func:`range_digits`) so that a differing range fetches about :data:`ROWS_PER_RANGE` rows, and only the rows
of the ranges whose checksums differ are staged and compared row by row.

Equal canonical texts mean equal values under reconciliation's rules; a value the two engines write
differently (a double Spark writes ``1.0E10``) only makes its range differ, and that range is compared row by
row: a range is never called equal that is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

FINEST: Final = 4  # hex digits of the md5: at most 65,536 ranges
ROWS_PER_RANGE: Final = 256  # about how many rows a differing range fetches
MARKER: Final = "range"  # a stage row's _kind naming a differing range (its _kafka_offset; the cut in _kafka_partition)


@dataclass(frozen=True, slots=True)
class Checksum:
    """A range's rows, and the sums of their hashes' high and low 32 bits; ``unsure`` counts rows whose
    values cannot be compared by hash (a value the record left out, an order the engines may not share),
    which make the range differ (:func:`reprocess.spark.checksums.differing_rows`)."""

    rows: int
    high: int
    low: int
    unsure: int = 0

    def __add__(self, other: Checksum) -> Checksum:
        return Checksum(
            self.rows + other.rows, self.high + other.high, self.low + other.low, self.unsure + other.unsure
        )


EMPTY: Final = Checksum(0, 0, 0)


def range_digits(rows: int) -> int:
    """How many hex digits of the key's md5 name its range: the fewest that give ranges of at most about
    :data:`ROWS_PER_RANGE` rows, at most :data:`FINEST`.

    >>> [range_digits(n) for n in (0, 4_000, 5_000, 1_000_000, 10_000_000)]
    [1, 1, 2, 3, 4]
    """
    digits = 1
    while digits < FINEST and rows > ROWS_PER_RANGE * 16**digits:
        digits += 1
    return digits


def coarsen(finest: Mapping[int, Checksum], digits: int) -> dict[int, Checksum]:
    """The checksums of the ranges of ``digits`` hex digits, from those of :data:`FINEST` digits.

    >>> coarsen({0x1234: Checksum(1, 5, 6), 0x12ff: Checksum(2, 1, 1), 0xa000: Checksum(1, 0, 0)}, 2)
    {18: Checksum(rows=3, high=6, low=7, unsure=0), 160: Checksum(rows=1, high=0, low=0, unsure=0)}
    """
    out: dict[int, Checksum] = {}
    for leaf, checksum in finest.items():
        prefix = leaf >> (4 * (FINEST - digits))
        out[prefix] = out.get(prefix, EMPTY) + checksum
    return out
