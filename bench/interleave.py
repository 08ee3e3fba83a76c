"""Two cases timed interleaved, A B A B A B, in one sitting, and the ratio of their medians.

Ceiling A alone measured 3.2, 4.9 and 7.8 s for the same 1 M rows on this machine on different
days (PostgreSQL's checkpoints and autovacuum after other work, other engineers' load), so a ratio
of one product run to one ceiling run timed minutes apart measured the machine as much as the
product. Timed in alternation, both see the same machine; the median of each series drops one
outlier, and the spread (each series' range, each pair's own ratio) says how far to trust it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import median
from typing import Final

from bench.context import Result

PAIRS: Final = 3


@dataclass(frozen=True)
class Interleaved:
    """``a[i]`` ran just before ``b[i]``; both series cover the same records."""

    a: list[Result]
    b: list[Result]

    @property
    def ratio(self) -> float:
        """B's records/s ÷ A's, of the medians."""
        return ratio_of_medians([r.seconds for r in self.a], [r.seconds for r in self.b])

    def spread(self, a_name: str, b_name: str) -> str:
        return spread([r.seconds for r in self.a], [r.seconds for r in self.b], a_name, b_name)


def interleave(first: Callable[[int], Result], second: Callable[[int], Result], pairs: int = PAIRS) -> Interleaved:
    """``first(0), second(0), first(1), second(1), …``: ``pairs`` of each, alternating."""
    a: list[Result] = []
    b: list[Result] = []
    for i in range(pairs):
        a.append(first(i))
        b.append(second(i))
    return Interleaved(a, b)


def ratio_of_medians(a_seconds: list[float], b_seconds: list[float]) -> float:
    """B's rate ÷ A's over the same records: A's median seconds ÷ B's.

    Examples
    --------
    >>> ratio_of_medians([4.0, 9.0, 5.0], [8.0, 10.0, 7.5])
    0.625
    """
    return median(a_seconds) / max(1e-9, median(b_seconds))


def spread(a_seconds: list[float], b_seconds: list[float], a_name: str, b_name: str) -> str:
    """Each series in the order it ran, its median, and the range of the pairs' own ratios.

    Examples
    --------
    >>> spread([4.0, 9.0, 5.0], [8.0, 10.0, 7.5], "ceiling A", "product")
    'ceiling A 4.0 / 9.0 / 5.0 s (median 5.0), product 8.0 / 10.0 / 7.5 s (median 8.0); pair by pair 0.50-0.90'
    """
    pairs = [a / max(1e-9, b) for a, b in zip(a_seconds, b_seconds, strict=True)]

    def series(seconds: list[float]) -> str:
        return f"{' / '.join(f'{s:.1f}' for s in seconds)} s (median {median(seconds):.1f})"

    return f"{a_name} {series(a_seconds)}, {b_name} {series(b_seconds)}; pair by pair {min(pairs):.2f}-{max(pairs):.2f}"
