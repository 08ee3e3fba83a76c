"""A plan's diff: what the commit's own statements would change in the target, counted, then undone.

:func:`diff_stage` runs inside a transaction its caller rolls back. It keeps the target rows of the
stage's keys as they are (a temporary table), runs :func:`reprocess.postgres.merge_stage.merge_stage`,
the very statements a commit runs (merge, tombstones, Debezium's left-out values, dead letters),
then compares the rows after with the rows before, per key and column, with the one derived-vs-stored
formulation reconciliation's value check uses too (:mod:`reprocess.postgres.compare`). Plan and apply cannot
disagree on what changes, because no second formulation of the merge rules exists to drift: only
the state of the table between the plan and the apply can make them differ, and the apply refuses
a stale plan for the changes it can see (reprocess.operations.preview).

Each staged key falls in one kind, attributed to the partition of its newest staged record:

- ``inserted``: no row before, a row after;
- ``updated``: a row before and after, some value column differs (counted per column);
- ``rewritten``: a newer record with the same values (the row's lineage moves, nothing else);
- ``unchanged``: the same row before and after (or a tombstone for a key without a row);
- ``refused``: the newest staged record is older than the row (or the deletion marker) the key has;
  counted in records (every staged record of the key is older then), its samples in keys;
- ``deleted``: a row before, none after (a tombstone; or a backfill's row another spec version
  derived from a record this spec no longer keeps, attributed to that record's partition:
  :func:`~reprocess.postgres.merge.underived_sql`).

For CDC, each partition also counts the values its records left out that nothing could resolve
(``values_incomplete``: what the commit records in ``reprocess.incomplete_values``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from psycopg2 import sql
from sqlalchemy import Connection

from reprocess.core.ordering import LINEAGE_ORDER
from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import DEAD, FILTERED, ROW, TOMBSTONE
from reprocess.core.stages import WriteTarget
from reprocess.postgres.column_sql import comparable
from reprocess.postgres.compare import any_differs, differs, value_columns
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.merge import newest_per_key, underived_sql
from reprocess.postgres.merge_stage import merge_stage, stage_counts
from reprocess.postgres.target import target_identifier

KINDS: Final = ("inserted", "updated", "rewritten", "unchanged", "refused", "deleted")
SAMPLES: Final = 20
_BEFORE: Final = sql.Identifier("_reprocess_plan_before")
_NEWEST: Final = sql.Identifier("_reprocess_plan_newest")
_DIFF: Final = sql.Identifier("_reprocess_plan_diff")


@dataclass(slots=True)
class PartitionDiff:
    """One partition's counts: the kinds above, plus its dead letters and filtered records."""

    topic: str
    partition: int
    kinds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    dead_letters: int = 0
    records_filtered: int = 0
    values_incomplete: int = 0


@dataclass(frozen=True, slots=True)
class StageDiff:
    """What committing the stage would do: ``apply`` is the commit's own counts (the names of a
    run's counts), ``partitions`` and ``columns`` (updated rows per changed column) the diff,
    ``samples`` up to :data:`SAMPLES` keys per kind with the changed columns' before and after."""

    apply: dict[str, int]
    partitions: list[PartitionDiff]
    columns: dict[str, int]
    samples: dict[str, list[dict[str, Any]]]


def diff_stage(
    conn: Connection,
    spec: PipelineSpec,
    run_id: str,
    stage: sql.Composable,
    *,
    spec_version: int,
    rederives: Sequence[OffsetRange],
) -> StageDiff:
    """The diff of committing ``stage`` into the live target, in ``conn``'s transaction, which the
    caller MUST roll back: the commit's statements really run in it (see the module).

    Raises what :func:`~reprocess.postgres.merge_stage.merge_stage` raises when the commit would refuse
    the stage (dead letters over the threshold, split keys): the apply would refuse it too.
    """
    cur = pg_cursor(conn)
    counts = stage_counts(cur, stage)
    counts.pop("_filtered_rows"), counts.pop("_moved")
    key = sql.SQL(", ").join(map(sql.Identifier, spec.key))
    cur.execute(
        sql.SQL(
            "CREATE TEMP TABLE {newest} ON COMMIT DROP AS SELECT _w.*, _c._key_records FROM ({select}) AS _w "
            "JOIN (SELECT {key}, sum(_records) AS _key_records FROM {stage} WHERE _kind IN ({row}, {tombstone}) "
            "GROUP BY {key}) AS _c USING ({key})"
        ).format(
            newest=_NEWEST,
            select=newest_per_key(spec, stage),
            key=key,
            stage=stage,
            row=sql.Literal(ROW),
            tombstone=sql.Literal(TOMBSTONE),
        )
    )
    rederived = tuple(rederives)  # the Diff stage's (a backfill's ranges)
    if rederived:  # rows another spec version derived from a record this spec no longer keeps: deleted
        lineage = sql.SQL(", ").join(map(sql.Identifier, LINEAGE_ORDER))
        cur.execute(
            sql.SQL(
                "INSERT INTO {newest} ({key}, _kind, {lineage}, _key_records) SELECT {x_key}, {dead}, {x_lineage}, 0 "
                "FROM {target} AS _x WHERE {underived} AND NOT EXISTS (SELECT 1 FROM {newest} AS _n WHERE {same})"
            ).format(
                newest=_NEWEST,
                key=key,
                lineage=lineage,
                x_key=sql.SQL(", ").join(sql.SQL("_x.{}").format(sql.Identifier(k)) for k in spec.key),
                dead=sql.Literal(DEAD),
                x_lineage=sql.SQL(", ").join(sql.SQL("_x.{}").format(sql.Identifier(c)) for c in LINEAGE_ORDER),
                target=target_identifier(spec),
                underived=underived_sql(spec, stage, rederived),
                same=_same(spec, "_x"),
            ),
            {"spec_version": spec_version},
        )
    cur.execute(
        sql.SQL(
            "CREATE TEMP TABLE {before} ON COMMIT DROP AS SELECT _t.* FROM {target} AS _t "
            "WHERE ({key}) IN (SELECT {key} FROM {newest})"
        ).format(before=_BEFORE, target=target_identifier(spec), key=key, newest=_NEWEST)
    )
    counts.update(
        merge_stage(
            conn,
            spec,
            run_id,
            stage,
            into=WriteTarget.live(spec),
            rederives=rederived,
            spec_version=spec_version,
            counts=counts,
        )
    )
    values = value_columns(spec)
    # Classified once; the counts and the samples both read it.
    cur.execute(
        sql.SQL("CREATE TEMP TABLE {diff} ON COMMIT DROP AS {classified}").format(
            diff=_DIFF, classified=_classified(spec, values)
        )
    )
    partitions = _partitions(cur, spec, stage, values, run_id)
    columns = dict.fromkeys(values, 0)
    for p in partitions.values():
        for name, n in p.pop("columns").items():
            columns[name] += n
    return StageDiff(
        counts,
        [PartitionDiff(**p) for p in partitions.values()],
        {c: n for c, n in columns.items() if n},
        _samples(cur, spec, values),
    )


def _classified(spec: PipelineSpec, values: list[str]) -> sql.Composed:
    """Per staged key: its newest record's partition, its kind, and a flag per value column that changed:
    the row after (what the commit derived) against the row before (what was stored), compared as
    reconciliation's value check compares (:mod:`reprocess.postgres.compare`)."""
    ident = sql.Identifier
    kinds = {c.name: c.type for c in spec.columns}

    def row(alias: str, cols: list[str] | tuple[str, ...]) -> sql.Composed:
        return sql.SQL("ROW({})").format(
            sql.SQL(", ").join(comparable(sql.SQL("{}.{}").format(ident(alias), ident(c)), kinds.get(c)) for c in cols)
        )

    k0 = ident(spec.key[0])
    lineage = list(LINEAGE_ORDER)
    kind = sql.SQL(
        "CASE WHEN _b.{k0} IS NULL AND _a.{k0} IS NOT NULL THEN 'inserted' "
        "WHEN _b.{k0} IS NOT NULL AND _a.{k0} IS NULL THEN 'deleted' "
        "WHEN _b.{k0} IS NULL THEN CASE WHEN _n._kind = 'row' THEN 'refused' ELSE 'unchanged' END "
        "WHEN {values_differ} THEN 'updated' "
        "WHEN {b_lineage} IS DISTINCT FROM {a_lineage} THEN 'rewritten' "
        "WHEN {b_lineage} IS DISTINCT FROM {n_lineage} THEN 'refused' ELSE 'unchanged' END"
    ).format(
        k0=k0,
        values_differ=any_differs(spec, "_a", "_b"),
        b_lineage=row("_b", lineage),
        a_lineage=row("_a", lineage),
        n_lineage=row("_n", lineage),
    )
    changed = [
        sql.SQL("(_b.{k0} IS NOT NULL AND _a.{k0} IS NOT NULL AND {differs}) AS {flag}").format(
            k0=k0, differs=differs(spec, c, "_a", "_b"), flag=ident(f"_changed_{i}")
        )
        for i, c in enumerate(values)
    ]
    return sql.SQL(
        "SELECT _n._kafka_topic, _n._kafka_partition, _n._key_records, {kind} AS _diff, {changed}, {keys} "
        "FROM {newest} AS _n LEFT JOIN {before} AS _b ON {same_b} LEFT JOIN {target} AS _a ON {same_a}"
    ).format(
        kind=kind,
        changed=sql.SQL(", ").join(changed) if changed else sql.SQL("NULL AS _none"),
        keys=sql.SQL(", ").join(sql.SQL("_n.{}").format(ident(k)) for k in spec.key),
        newest=_NEWEST,
        before=_BEFORE,
        target=target_identifier(spec),
        same_b=_same(spec, "_b"),
        same_a=_same(spec, "_a"),
    )


def _same(spec: PipelineSpec, alias: str) -> sql.Composed:
    return sql.SQL(" AND ").join(
        sql.SQL("{a}.{k} = _n.{k}").format(a=sql.Identifier(alias), k=sql.Identifier(k)) for k in spec.key
    )


def _partitions(
    cur: Any, spec: PipelineSpec, stage: sql.Composable, values: list[str], run_id: str
) -> dict[tuple[str, int], Any]:
    """Counts per partition: the keys' kinds (refused ones in records) and changed columns, the
    stage's dead letters and filtered records, the values the merge recorded incomplete."""
    flags = [sql.SQL("count(*) FILTER (WHERE {})").format(sql.Identifier(f"_changed_{i}")) for i in range(len(values))]
    cur.execute(
        sql.SQL(
            "SELECT _kafka_topic, _kafka_partition, _diff, CASE WHEN _diff = 'refused' THEN sum(_key_records) "
            "ELSE count(*) END{flags} FROM {classified} AS _c GROUP BY 1, 2, 3"
        ).format(
            flags=sql.SQL("").join(sql.SQL(", {}").format(f) for f in flags),
            classified=_DIFF,
        )
    )
    out: dict[tuple[str, int], Any] = {}

    def part(topic: str, partition: int) -> dict[str, Any]:
        return out.setdefault(
            (topic, partition),
            {
                "topic": topic,
                "partition": partition,
                "kinds": dict.fromkeys(KINDS, 0),
                "columns": dict.fromkeys(values, 0),
            },
        )

    for topic, partition, kind, n, *changed in cur.fetchall():
        p = part(topic, int(partition))
        p["kinds"][kind] += int(n)
        for name, c in zip(values, changed, strict=True):
            p["columns"][name] += int(c)
    cur.execute(
        sql.SQL(
            "SELECT _kafka_topic, _kafka_partition, count(*) FILTER (WHERE _kind = {dead}), "
            "coalesce(sum(_records) FILTER (WHERE _kind = {filtered}), 0) FROM {stage} "
            "WHERE _kind IN ({dead}, {filtered}) GROUP BY 1, 2"
        ).format(dead=sql.Literal(DEAD), filtered=sql.Literal(FILTERED), stage=stage)
    )
    for topic, partition, dead, filtered in cur.fetchall():
        p = part(topic, int(partition))
        p["dead_letters"], p["records_filtered"] = int(dead), int(filtered)
    if spec.unchanged_columns:  # recorded by the merge in this (rolled-back) transaction
        cur.execute(
            "SELECT topic, partition, count(*) FROM reprocess.incomplete_values WHERE pipeline = %s "
            "AND run_id = %s GROUP BY 1, 2",
            (spec.name, run_id),
        )
        for topic, partition, n in cur.fetchall():
            part(topic, int(partition))["values_incomplete"] = int(n)
    return dict(sorted(out.items()))


def _samples(cur: Any, spec: PipelineSpec, values: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Up to :data:`SAMPLES` keys per kind (lowest keys first), with the before and after of the
    columns that changed (of every value column for an insert or a delete)."""
    ident = sql.Identifier
    keys = sql.SQL(", ").join(map(ident, spec.key))
    cur.execute(
        sql.SQL(
            "SELECT _n._diff, jsonb_build_object({key_json}), to_jsonb(_b), to_jsonb(_a) FROM (SELECT * FROM "
            "(SELECT _diff, {keys}, row_number() OVER (PARTITION BY _diff ORDER BY {keys}) AS _k FROM {diff}) AS _r "
            "WHERE _k <= {n}) AS _n LEFT JOIN {before} AS _b ON {same_b} LEFT JOIN {target} AS _a ON {same_a} "
            "ORDER BY _n._diff, _n._k"
        ).format(
            key_json=sql.SQL(", ").join(sql.SQL("{}, _n.{}").format(sql.Literal(k), ident(k)) for k in spec.key),
            keys=keys,
            diff=_DIFF,
            n=sql.Literal(SAMPLES),
            before=_BEFORE,
            target=target_identifier(spec),
            same_b=_same(spec, "_b"),
            same_a=_same(spec, "_a"),
        )
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for kind, key, before, after in cur.fetchall():
        out.setdefault(kind, []).append({"key": key, "changes": _changes(values, before, after)})
    return out


def _changes(values: list[str], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, Any]:
    """column → [before, after] for the columns that differ (None for a side without a row)."""
    b, a = before or {}, after or {}
    return {c: [b.get(c), a.get(c)] for c in values if (before is None) != (after is None) or b.get(c) != a.get(c)}
