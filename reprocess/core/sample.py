"""A sample of a topic's records and what the Spark job's decoder made of it (``reprocess validate``
and the backfill's dry run): plain values, so the check (operations) and the decoding (spark)
share them without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SampleResult:
    """What the Spark job's decoder made of a sample: per record its error (None: a row), and
    for good records whether each key column and the ordering column got a value."""

    records: int
    # error kind (the text before the first ':', as reprocess.dead_letters.error_kind) →
    # (count, an example's offset, its whole error)
    errors: Mapping[str, tuple[int, int, str]]
    missing: Mapping[str, int]  # column → good records without a value


@dataclass(frozen=True, slots=True)
class SampleRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()  # as the client gives them ($headers columns read them)
