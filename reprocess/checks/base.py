"""What a check is (:class:`Check`), what it reads (:class:`Query`) and where it runs (:class:`Window`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from psycopg2 import sql
from sqlalchemy import Connection

from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.core.spec import PipelineSpec

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Window:
    """One check of a window: its transaction, the spec, the stage Spark wrote (the newest record per
    key of the window's ranges and every invalid record) and the ranges checked. A query's answer is
    kept (:meth:`result`): checks that read the same query run it once."""

    conn: Connection
    cur: Any  # a psycopg2 cursor in conn's transaction (postgres.db.pg_cursor)
    spec: PipelineSpec
    stage: sql.Composable
    ranges: Sequence[OffsetRange]
    answers: dict[str, Mapping[TopicPartition, Any]] = field(default_factory=dict)

    def result(self, query: Query[R], tp: TopicPartition) -> R:
        """``query``'s result for the partition ``tp`` (its ``none`` when it found nothing there)."""
        if query.name not in self.answers:
            self.answers[query.name] = query.run(self)
        found: R = self.answers[query.name].get(tp, query.none)
        return found


def ranges_params(window: Window) -> dict[str, Any]:
    """The window's ranges as arrays (``topics``, ``partitions``, ``starts``, ``ends``) and its ``pipeline``:
    what a query that answers every partition in one statement unnests."""
    ranges = window.ranges
    return {"pipeline": window.spec.name, "topics": [r.topic for r in ranges],
            "partitions": [r.partition for r in ranges], "starts": [r.start for r in ranges],
            "ends": [r.end for r in ranges]}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Query(Generic[R]):
    """SQL a check reads: ``run`` returns one typed result per partition of the window; a partition
    it returns nothing for has ``none``."""

    name: str
    run: Callable[[Window], Mapping[TopicPartition, R]]
    none: R


class Check(Protocol[R]):
    """One kind of gap. ``query`` gives its result per partition; ``detail`` says what it found
    (``None``: nothing); ``heal`` is the range whose backfill closes it: ``window`` when its records may
    lie anywhere in the window, ``None`` when it has no range of its own (the other gaps' heal covers
    it, else the whole window). ``left_out``: the spec's columns an event may leave out."""

    @property
    def kind(self) -> str: ...

    @property
    def query(self) -> Query[R]: ...

    def detail(self, result: R) -> str | None: ...

    def heal(self, result: R, window: OffsetRange, left_out: Collection[str]) -> OffsetRange | None: ...


@dataclass(frozen=True, slots=True)
class Found:
    """What one check found in one partition: its kind (stored), detail and heal range."""

    kind: str
    detail: str
    heal: OffsetRange | None
