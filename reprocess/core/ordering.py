"""The one rule that decides which of two records of a key is newer (DESIGN §2, commit step 3).

A pipeline's :class:`Ordering` is built once from its spec and asked by every consumer: the
in-run dedupe in Spark (:meth:`Ordering.fields`), the merge's ``WHERE`` and its ``DISTINCT ON``
(:meth:`Ordering.newer_sql`, :meth:`Ordering.newest_first_sql`). No consumer writes its own
field list, so they cannot drift.

The order is TOTAL (a lexicographic tuple of NOT NULL values), so ``DISTINCT ON``, Spark's
``max_by`` and a Python ``max`` pick the same record:

- ``offset``: ``(_kafka_topic, _kafka_partition, _kafka_offset)``. Only the offset part means
  "newer", and only inside one (topic, partition). The tuple stays a valid order because the
  spec and the planner keep every key in one (topic, partition):

  * a pipeline that reads several topics cannot order by offset (:class:`SpecError`): the same
    key on two topics has no log order;
  * a topic whose partition count changed since the pipeline's last committed run fails the
    plan (:meth:`Ordering.check_partition_counts`): the default partitioner hashes the key
    modulo the count, so keys moved, and comparing (partition, offset) across partitions would
    let an old row on a higher-numbered partition win forever. Such a run may go ahead only
    when it acknowledges the change (``acknowledge_partition_change``) AND the pipeline orders
    by a column, which does not depend on where a record sits.

- ``column``: ``(<column>, _kafka_topic, _kafka_partition, _kafka_offset)``. The column (a
  version or event time) must be ``required``, so a good row never carries NULL (a NULL would
  make the merge's row comparison unknown and freeze the row forever). Ties on the column are
  broken by offset within a partition (a later write of the same version wins) and by
  (topic, partition) across partitions: equal versions on two partitions are equal by the
  producer's own account, and the deterministic tie-break keeps the order total.

Both engines compare by the same rule (DESIGN "One comparison rule on both engines"): values by
value, never by their staged text (Spark orders a ``numeric`` or a ``time`` by a typed sort key,
:func:`reprocess.formats.typed.sort_key_sql`), and text (a ``text`` column, the topic tie-break)
byte-wise, as Spark compares strings: PostgreSQL compares them under ``COLLATE "C"`` whatever the
database's collation. A type the two cannot order alike is refused as the ordering column
(:data:`UNORDERABLE`).

Why not "timestamp across partitions, offset within"? That pairwise rule is not transitive
(record a beats b by offset, b beats c by timestamp, c beats a by timestamp), so ``DISTINCT ON``
and ``max_by`` could pick different winners. Refusing the unsafe layouts keeps one total order.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from psycopg2 import sql

from reprocess.core.column_types import ColumnType
from reprocess.core.errors import OrderingError, SpecError

LINEAGE_ORDER: Final = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
# Column types no rule orders alike on both engines: PostgreSQL has no order for json, orders jsonb
# by its own rule (objects by their number of pairs first) and arrays element by element, while
# Spark would compare the staged text.
UNORDERABLE: Final = (ColumnType.JSON, ColumnType.JSONB, ColumnType.TEXT_ARRAY, ColumnType.BIGINT_ARRAY)
# The most digits a numeric ordering column may have: Spark's decimal holds them, and rounds to the
# column's scale as PostgreSQL does.
ORDERABLE_DIGITS: Final = 38

# Debezium envelope positions that are not commit-ordered, and what ordering by one loses. Kafka
# order within the key's partition is what Debezium's own sinks follow: the default, ``offset``.
UNORDERED_POSITIONS: Final = {
    "$source.lsn": "it is the WAL position of the change, not of its commit: a transaction open while the connector "
    "snapshots commits its update at a position below the snapshot's read of the same row, and the older read "
    "then wins for good",
    "$source.pos": "it is the byte offset inside the current MySQL binlog file and starts small again in every new "
    "file, so the changes after a rotation lose to older ones",
}


class OrderingMode(enum.StrEnum):
    """How "newer" is decided when two records carry the same key."""

    OFFSET = "offset"  # Kafka offset, within one (topic, partition)
    COLUMN = "column"  # a required version or event-time column, ties broken by offset


@dataclass(frozen=True, slots=True)
class Ordering:
    """A pipeline's validated "newer" rule; build it with :meth:`parse` (the spec does)."""

    mode: OrderingMode = OrderingMode.OFFSET
    column: str | None = None
    column_type: ColumnType | None = None  # the column's type: a text one compares under COLLATE "C"

    @classmethod
    def parse(
        cls,
        raw: object,
        *,
        required: Mapping[str, bool],
        types: Mapping[str, tuple[ColumnType, tuple[int, int] | None]],
        topics: Sequence[str],
        fail: Callable[[str, str], SpecError],
    ) -> Ordering:
        """The spec's ``ordering`` field → an Ordering; ``fail(field, problem)`` names file and field.

        ``required`` maps each column name to its ``required`` flag, ``types`` to its type and
        ``numeric(p,s)``'s (precision, scale).

        Examples
        --------
        >>> def fail(f, p):
        ...     return SpecError(f"p.yaml: field '{f}': {p}")
        >>> types = {"v": (ColumnType.BIGINT, None), "doc": (ColumnType.JSONB, None)}
        >>> Ordering.parse({"mode": "column", "column": "v"}, required={"v": True}, types=types, topics=["t"],
        ...                fail=fail).fields
        ('v', '_kafka_topic', '_kafka_partition', '_kafka_offset')
        >>> try:
        ...     Ordering.parse({"mode": "column", "column": "doc"}, required={"doc": True}, types=types,
        ...                    topics=["t"], fail=fail)
        ... except SpecError as e:
        ...     print(str(e).split(", which")[0])
        p.yaml: field 'ordering.column': column 'doc' is jsonb
        """
        if isinstance(raw, str):
            raw = {"mode": raw}
        if not isinstance(raw, Mapping):
            raise fail("ordering", "must be 'offset' or {mode: column, column: <name>}")
        try:
            mode = OrderingMode(raw.get("mode", "offset"))
        except ValueError:
            raise fail("ordering.mode", f"{raw.get('mode')!r} is not 'offset' or 'column'") from None
        if mode is OrderingMode.OFFSET:
            if len(topics) > 1:
                raise fail(
                    "ordering",
                    f"offset ordering cannot order one key's records across the topics {list(topics)} (offsets "
                    "compare only within one partition); order by a required version or event-time column "
                    "({mode: column, column: <name>}) or split the pipeline per topic",
                )
            return cls(OrderingMode.OFFSET)
        column = raw.get("column")
        if not isinstance(column, str) or column not in required:
            raise fail("ordering.column", f"must name one of the columns {sorted(required)}, got {column!r}")
        if not required[column]:
            raise fail(
                "ordering.column",
                f"column {column!r} must be required (a record without it would carry NULL, which no "
                f"ordering can compare, and freeze its key); set columns.{column}.required: true",
            )
        kind, numeric = types[column]
        if kind in UNORDERABLE or (numeric is not None and numeric[0] > ORDERABLE_DIGITS):
            spelled = f"numeric({numeric[0]},{numeric[1]})" if numeric else kind.value
            raise fail(
                "ordering.column",
                f"column {column!r} is {spelled}, which Spark's dedupe and PostgreSQL's merge cannot order alike "
                f"(a key's winner would depend on where runs are cut); order by a column of a scalar type (an "
                f"integer, numeric of at most {ORDERABLE_DIGITS} digits, a timestamp, date, time or text), e.g. "
                "a version or event-time column",
            )
        return cls(OrderingMode.COLUMN, column, kind)

    @property
    def fields(self) -> tuple[str, ...]:
        """Stage/target columns that decide "newer", most significant first (all NOT NULL)."""
        return ((self.column,) if self.column else ()) + LINEAGE_ORDER

    def newer_sql(self, existing: sql.Composable, incoming: sql.Composable) -> sql.Composed:
        """``(existing fields) < (incoming fields)``: true when the incoming record is newer.

        ``existing``/``incoming`` are table aliases (``sql.Identifier`` or ``sql.SQL("EXCLUDED")``).
        """
        return sql.SQL("({}) < ({})").format(
            sql.SQL(", ").join(self._field_sql(existing, f) for f in self.fields),
            sql.SQL(", ").join(self._field_sql(incoming, f) for f in self.fields),
        )

    def _field_sql(self, table: sql.Composable | None, field: str) -> sql.Composed:
        """A field as the order compares it: text byte-wise (``COLLATE "C"``, as Spark compares
        strings), whatever the database's collation (an ``en_US`` one puts ``B`` after ``a``)."""
        column = sql.Identifier(field) if table is None else sql.SQL("{}.{}").format(table, sql.Identifier(field))
        text = field == "_kafka_topic" or (field == self.column and self.column_type is ColumnType.TEXT)
        return sql.SQL('{} COLLATE "C"').format(column) if text else sql.SQL("{}").format(column)

    def same_record_sql(self, existing: sql.Composable, incoming: sql.Composable) -> sql.Composed:
        """``(existing lineage) = (incoming lineage)``: both rows derive from the same Kafka record.

        Neither is newer, yet a replay of that record may derive a different row (the spec or
        the transform changed): that is when the merge re-derives. The record is identified by
        its (topic, partition, offset), not by the ordering column, which a fixed mapping may
        itself change.
        """
        return sql.SQL("({}) = ({})").format(
            sql.SQL(", ").join(sql.SQL("{}.{}").format(existing, sql.Identifier(f)) for f in LINEAGE_ORDER),
            sql.SQL(", ").join(sql.SQL("{}.{}").format(incoming, sql.Identifier(f)) for f in LINEAGE_ORDER),
        )

    def newest_first_sql(self) -> sql.Composed:
        """The ``ORDER BY`` tail after the key that makes ``DISTINCT ON (key)`` keep the newest."""
        return sql.SQL(", ").join(sql.SQL("{} DESC").format(self._field_sql(None, f)) for f in self.fields)

    def check_partition_counts(
        self,
        pipeline: str,
        before: Mapping[str, int],
        now: Mapping[str, int],
        *,
        acknowledged: bool,
    ) -> list[str]:
        """Refuse a plan whose topics changed partition count since the last committed run.

        ``before`` holds each topic's count at the pipeline's newest committed run that saw it,
        ``now`` the snapshot's. Returns warnings for an acknowledged change.

        Raises
        ------
        OrderingError
            A count changed and the run did not acknowledge it, or the pipeline orders by offset.

        Examples
        --------
        >>> by_v = Ordering(OrderingMode.COLUMN, "v")
        >>> by_v.check_partition_counts("p", {"t": 2}, {"t": 3}, acknowledged=True)[0].split(":")[0]
        'topic t has 3 partitions, 2 at the last committed run (acknowledged)'
        >>> Ordering().check_partition_counts("p", {"t": 2}, {"t": 2}, acknowledged=False)
        []
        """
        changed = {t: (before[t], n) for t, n in now.items() if before.get(t) not in (None, n)}
        if not changed:
            return []
        what = "; ".join(
            f"topic {t} has {n} partitions, {b} at the last committed run" for t, (b, n) in changed.items()
        )
        if self.column is None:
            raise OrderingError(
                f"{pipeline}: {what}. Keys may have moved partition and this pipeline orders by Kafka offset, "
                "which compares only within one partition: a moved key's new records could lose to its old row "
                "forever. Nothing was planned. Order the pipeline by a required version or event-time column "
                "(ordering: {mode: column, column: <name>}), then run a backfill with "
                "acknowledge_partition_change=true if every stored row already holds that column, else rebuild "
                "the table with mode=rebuild.",
                pipeline=pipeline,
            )
        if not acknowledged:
            raise OrderingError(
                f"{pipeline}: {what}. Keys may have moved partition; the pipeline orders by {self.column}, so "
                "their rows stay correct, but the change needs a decision. Nothing was planned: run a backfill "
                "with acknowledge_partition_change=true (start_mode=ledger continues where the ledger stands).",
                pipeline=pipeline,
            )
        return [f"{what} (acknowledged): keys may have moved partition; ordered by {self.column}"]

    def check_topic_ids(
        self, pipeline: str, before: Mapping[str, str], now: Mapping[str, str], *, acknowledged: bool
    ) -> list[str]:
        """Refuse a plan whose topic was deleted and re-created (or migrated) since the last committed run.

        ``before``/``now`` map each topic to its broker id at the newest committed run that saw
        it and in the snapshot. A new incarnation starts its offsets over: the ledger's positions
        would skip its records below them, and, under offset ordering, stored rows of the old
        incarnation (higher offsets) would beat its records forever. Returns warnings for an
        acknowledged change (column ordering only).

        Raises
        ------
        OrderingError
            A topic's id changed and the run did not acknowledge it, or the pipeline orders by offset.

        Examples
        --------
        >>> Ordering(OrderingMode.COLUMN, "v").check_topic_ids("p", {"t": "A"}, {"t": "B"}, acknowledged=True)
        ['topic t was re-created (id A → B) since the last committed run (acknowledged)']
        >>> Ordering().check_topic_ids("p", {"t": "A"}, {"t": "A", "u": "C"}, acknowledged=False)
        []
        """
        changed = {t: (before[t], i) for t, i in now.items() if before.get(t) not in (None, i)}
        if not changed:
            return []
        what = "; ".join(f"topic {t} was re-created (id {b} → {i}) since the last committed run" for t, (b, i) in
                         changed.items())  # fmt: skip
        if self.column is not None and acknowledged:
            return [f"{what} (acknowledged)"]
        remedy = "rebuild the table from the new topic: a backfill with mode=rebuild"
        if self.column is not None:
            remedy += (
                ", or, if the new topic holds the history again, a backfill with start_mode=earliest and "
                "acknowledge_partition_change=true"
            )
        raise OrderingError(
            f"{pipeline}: {what}. Its offsets started over: reading on from the ledger would skip the new "
            "records below it, and rows stored from the old topic"
            + (" (higher offsets) would beat the new records. " if self.column is None else ". ")
            + f"Nothing was planned. To go ahead, {remedy}.",
            pipeline=pipeline,
        )


__all__ = ["LINEAGE_ORDER", "Ordering", "OrderingMode"]
