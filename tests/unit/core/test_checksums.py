"""The audit's key ranges (reprocess.core.checksums): how the key space is cut, and that a coarser cut's
checksums are the sums of the finer ones, so a range differs exactly when one of its finer ranges does."""

from __future__ import annotations

import hashlib
import random

from reprocess.core.checksums import FINEST, ROWS_PER_RANGE, Checksum, coarsen, range_digits


def _leaf(key: str) -> int:
    return int(hashlib.md5(f"{len(key)}:{key}".encode()).hexdigest()[:FINEST], 16)


def test_a_range_holds_at_most_about_rows_per_range_rows_up_to_the_finest_cut():
    for rows in (0, 1, 4_096, 4_097, 65_536, 65_537, 1_048_577, 10**9):
        digits = range_digits(rows)
        assert 1 <= digits <= FINEST
        assert digits == FINEST or rows <= ROWS_PER_RANGE * 16**digits
        assert digits == 1 or rows > ROWS_PER_RANGE * 16 ** (digits - 1)


def test_coarser_ranges_differ_exactly_where_a_finer_one_differs():
    rnd = random.Random(5)
    keys = [f"k-{n}" for n in range(5_000)]
    ours = {}
    for k in keys:
        h = rnd.getrandbits(64)
        ours[_leaf(k)] = ours.get(_leaf(k), Checksum(0, 0, 0)) + Checksum(1, h >> 32, h & 0xFFFFFFFF)
    theirs = dict(ours)
    changed = {_leaf(keys[7]), _leaf(keys[4_000])}
    for leaf in changed:
        theirs[leaf] = theirs[leaf] + Checksum(0, 1, 0)  # one row's hash changed
    for digits in range(1, FINEST + 1):
        mine, its = coarsen(ours, digits), coarsen(theirs, digits)
        assert sum(c.rows for c in mine.values()) == len(keys)
        differing = {r for r in mine if mine[r] != its[r]}
        assert differing == {leaf >> (4 * (FINEST - digits)) for leaf in changed}
