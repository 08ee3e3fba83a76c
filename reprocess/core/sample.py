"""A sample of a topic's records and what the Spark job's decoder made of it (``reprocess validate``
and the backfill's dry run): plain values, so the check (operations) and the decoding (spark)
share them without importing each other. Also which paths the sampled records hold
(:class:`PathCensus`), read on the driver from the raw records: a column whose path none of
them holds is NULL in every row a run writes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any


@dataclass(frozen=True, slots=True)
class SampleResult:
    """What the Spark job's decoder made of a sample: per record its error (None: a row), and
    for good records which columns got a value."""

    records: int
    # error kind (the text before the first ':', as reprocess.dead_letters.error_kind) →
    # (count, an example's offset, its whole error)
    errors: Mapping[str, tuple[int, int, str]]
    missing: Mapping[str, int]  # column (every one) → good records without a value
    rows: int = 0  # good records: neither a dead letter, a tombstone nor filtered out by ``where``
    # Why the spec's transform was not run on the sample (None: it ran, or there is none): the
    # values of the columns it may derive are then not known.
    transform_not_run: str | None = None
    transform_failed: bool = False  # it was imported and failed (a run would too), not merely not installed here


@dataclass(frozen=True, slots=True)
class SampleRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()  # as the client gives them ($headers columns read them)


@dataclass(frozen=True, slots=True)
class PathCensus:
    """In how many of ``records`` sampled records each path occurs: a value's dotted field paths,
    or a record's header names."""

    records: int
    counts: Mapping[str, int]

    def closest(self, path: str) -> str | None:
        """The path the records hold that is most like ``path`` (a typo's fix), or None.

        Examples
        --------
        >>> PathCensus(2, {"reading": 2, "reading.temp_c": 2, "id": 2}).closest("reading.tmp_c")
        'reading.temp_c'
        >>> PathCensus(2, {"id": 2}).closest("reading.tmp_c") is None
        True
        """
        found = get_close_matches(path, list(self.counts), n=1)
        return found[0] if found else None


def field_paths(doc: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted path into a parsed JSON value's objects, an inner object's own path included
    (arrays are not walked: a column's path names object fields only).

    Examples
    --------
    >>> list(field_paths({"id": 1, "reading": {"temp_c": 2.5, "at": None}, "tags": [{"k": 1}]}))
    ['id', 'reading', 'reading.temp_c', 'reading.at', 'tags']
    """
    if isinstance(doc, dict):
        for name, node in doc.items():
            yield prefix + name
            yield from field_paths(node, f"{prefix}{name}.")


def value_census(records: Sequence[SampleRecord], row_of: Callable[[Any], Any] | None) -> PathCensus | None:
    """The value field paths the sampled records hold, over those whose value is JSON giving an
    object through ``row_of`` (the format decoder's
    :meth:`~reprocess.formats.decoder.Decoder.sampled_row`: a ``json`` value itself, a Debezium
    event's row). None when ``row_of`` is: values that are not JSON on the driver (Avro is decoded
    only in Spark, with the registry's writer schemas).

    Examples
    --------
    >>> rec = lambda v: SampleRecord("t", 0, 0, 0, None, v)
    >>> value_census([rec(b'{"id": "a", "r": {"t": 1}}'), rec(b'{"id": "b"}'), rec(b"oops"), rec(None)], lambda d: d)
    PathCensus(records=2, counts={'id': 2, 'r': 1, 'r.t': 1})
    """
    if row_of is None:
        return None
    counts: Counter[str] = Counter()
    parsed = 0
    for record in records:
        try:
            doc = json.loads(record.value) if record.value else None
        except (UnicodeDecodeError, ValueError):
            continue
        doc = row_of(doc)
        if isinstance(doc, dict):
            parsed += 1
            counts.update(set(field_paths(doc)))
    return PathCensus(parsed, dict(sorted(counts.items())))


def header_census(records: Sequence[SampleRecord]) -> PathCensus:
    """The header names the sampled records carry (every format: headers are not the value's).

    Examples
    --------
    >>> header_census([SampleRecord("t", 0, 0, 0, None, b"{}", (("src", b"a"), ("src", b"b"))),
    ...                SampleRecord("t", 0, 1, 0, None, b"{}")])
    PathCensus(records=2, counts={'src': 1})
    """
    counts: Counter[str] = Counter()
    for record in records:
        counts.update({name for name, _ in record.headers})
    return PathCensus(len(records), dict(sorted(counts.items())))
