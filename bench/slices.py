"""The older slice a team replays after newer data has landed ("last Tuesday again"), in each peer's words.

The slice is the first half of each partition's offsets, ``[0, end // 2)``: replayed into a table
that already holds the whole range, every record in it is older than the key's newest, so an exact
sink changes nothing, and an unconditional upsert puts older versions over newer ones and brings
deleted keys back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping


def older_slice(ends: Mapping[int, int]) -> dict[int, int]:
    """Each partition's end offset of the older slice (exclusive): half its log, rounded down.

    Examples
    --------
    >>> older_slice({1: 7, 0: 10})
    {0: 5, 1: 3}
    """
    return {p: end // 2 for p, end in sorted(ends.items())}


def spark_offsets(topic: str, ends: Mapping[int, int]) -> str:
    """``ends`` as Spark's Kafka source's ``endingOffsets`` JSON (and the product's offsets' form).

    Examples
    --------
    >>> spark_offsets("t", {0: 5, 1: 3})
    '{"t": {"0": 5, "1": 3}}'
    """
    return json.dumps({topic: {str(p): end for p, end in sorted(ends.items())}})


def flink_offsets(ends: Mapping[int, int]) -> str:
    """``ends`` as Flink's Kafka connector's ``scan.bounded.specific-offsets``.

    Examples
    --------
    >>> flink_offsets({1: 3, 0: 5})
    'partition:0,offset:5;partition:1,offset:3'
    """
    return ";".join(f"partition:{p},offset:{end}" for p, end in sorted(ends.items()))
