"""Dead-letter redrive: re-read exactly the offsets of a pipeline's open dead letters.

After the producer or the spec is fixed, the dead letters (all, one error kind or one run's)
are turned into the fewest backfill confs that cover them: consecutive dead offsets form one
range, ranges closer than ``max_gap`` offsets are joined (re-reading a few good records is
harmless: the merge's ordering keeps newer rows intact and an unchanged record changes
nothing), and as the backfill reads one range per partition, the k-th range of every
partition goes into the k-th conf. The commit marks the dead letters whose record now parses
as resolved by that run (``target.resolve_dead_letters_sql``); a second redrive finds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, text

from reprocess.core.ranges import OffsetRange, TopicPartition, backfill_conf

DEFAULT_MAX_GAP: Final = 10_000

# Consecutive open dead offsets as islands (offset minus its rank is constant along a run of
# consecutive offsets), so a million dead letters come back as a few rows.
OPEN_ISLANDS: Final = text(
    """
SELECT topic, partition, min("offset") AS start_offset, max("offset") + 1 AS end_offset, count(*) AS n
  FROM (SELECT topic, partition, "offset",
               "offset" - row_number() OVER (PARTITION BY topic, partition ORDER BY "offset") AS island
          FROM reprocess.dead_letters
         WHERE pipeline = :pipeline AND resolved_run_id IS NULL
           AND (CAST(:kind AS text) IS NULL OR error_kind = :kind)
           AND (CAST(:run_id AS text) IS NULL OR run_id = :run_id)) dead
 GROUP BY topic, partition, island
 ORDER BY topic, partition, start_offset
"""
)


@dataclass(frozen=True, slots=True)
class RedrivePlan:
    pipeline: str
    dead_letters: int  # open dead letters covered
    ranges: tuple[OffsetRange, ...]  # after joining ranges closer than max_gap
    confs: tuple[dict[str, Any], ...]  # one backfill run each

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "dead_letters": self.dead_letters,
            "ranges": [[r.topic, r.partition, r.start, r.end] for r in self.ranges],
            "confs": list(self.confs),
        }


def join_close(ranges: list[OffsetRange], max_gap: int) -> list[OffsetRange]:
    """Join ranges of one partition whose gap is at most ``max_gap`` offsets (input sorted).

    Examples
    --------
    >>> [str(r) for r in join_close([OffsetRange("t", 0, 1, 2), OffsetRange("t", 0, 5, 7),
    ...                              OffsetRange("t", 0, 100, 101), OffsetRange("t", 1, 3, 4)], 10)]
    ['t[0] [1, 7)', 't[0] [100, 101)', 't[1] [3, 4)']
    """
    out: list[OffsetRange] = []
    for r in ranges:
        last = out[-1] if out else None
        if last is not None and last.tp == r.tp and r.start - last.end <= max_gap:
            out[-1] = OffsetRange(r.topic, r.partition, last.start, max(last.end, r.end))
        else:
            out.append(r)
    return out


def confs_for(ranges: list[OffsetRange]) -> list[dict[str, Any]]:
    """One backfill conf per "layer": the k-th range of each partition goes into conf k.

    Examples
    --------
    >>> confs = confs_for([OffsetRange("t", 0, 1, 7), OffsetRange("t", 0, 100, 101), OffsetRange("t", 1, 3, 4)])
    >>> [(c["start_value"], c["end_value"]) for c in confs]
    [('{"t": {"0": 1, "1": 3}}', '{"t": {"0": 7, "1": 4}}'), ('{"t": {"0": 100}}', '{"t": {"0": 101}}')]
    """
    layers: list[list[OffsetRange]] = []
    seen: dict[TopicPartition, int] = {}
    for r in ranges:
        k = seen.get(r.tp, 0)
        seen[r.tp] = k + 1
        if k == len(layers):
            layers.append([])
        layers[k].append(r)
    return [backfill_conf(layer) for layer in layers]


def plan_redrive(
    conn: Connection, pipeline: str, kind: str | None = None, run_id: str | None = None, max_gap: int = DEFAULT_MAX_GAP
) -> RedrivePlan:
    """The backfill confs that re-read the pipeline's open dead letters (optionally one error kind
    or one run's); empty when there is nothing left to redrive."""
    rows = conn.execute(OPEN_ISLANDS, {"pipeline": pipeline, "kind": kind, "run_id": run_id}).all()
    exact = [OffsetRange(r.topic, r.partition, r.start_offset, r.end_offset) for r in rows]
    ranges = join_close(exact, max_gap)
    return RedrivePlan(pipeline, sum(r.n for r in rows), tuple(ranges), tuple(confs_for(ranges)))
