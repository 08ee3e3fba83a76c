"""The key check that reconciliation and the rebuild's verification share: per (topic, partition)
of the newest record per key, how many keys are missing or stale in the target (or its deletion
markers), with example keys. Plain SQL over the stage and the target, so keys compare with their
own types."""

from __future__ import annotations

from psycopg2 import sql

from reprocess.core.ordering import LINEAGE_ORDER
from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.core.stage_rows import ROW
from reprocess.postgres.merge import newest_per_key
from reprocess.postgres.target import markers_identifier, target_identifier

EXAMPLE_KEYS = 2  # example keys named in a verdict's detail


def key_checks_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """Per (topic, partition) of the window's newest record per key: keys, missing, stale, examples.

    The newest record is a row or, with ``tombstones: delete``, a tombstone; the key's current
    state is its target row or its deletion marker (at most one exists). It is right when it
    carries the newest record's lineage or a newer one by the Ordering; absent is *missing*,
    older is *stale*, and so is one that cannot be compared (a NULL ordering value: the merge
    could never replace it). Keys join with their own types (the stage has the target's column
    types), so a numeric ``1.5`` matches ``1.500``. A rebuild verifies its shadow with it too
    (:mod:`reprocess.operations.rebuild_verify`); reconciliation's missing and older checks read it
    (:mod:`reprocess.checks.missing_keys`, run once for both).
    """
    n, c = sql.Identifier("n"), sql.Identifier("c")
    ident = sql.Identifier
    keys = sql.SQL(", ").join(map(ident, spec.key))
    fields = sql.SQL(", ").join(map(ident, dict.fromkeys([*spec.ordering.fields, *LINEAGE_ORDER])))
    if spec.tombstones is TombstoneMode.DELETE:
        newest = newest_per_key(spec, stage)
        current_sql = "SELECT {keys}, {fields} FROM {target} UNION ALL SELECT {keys}, {fields} FROM {markers}"
    else:
        newest = sql.SQL("SELECT * FROM {stage} WHERE _kind = {row}").format(stage=stage, row=sql.Literal(ROW))
        current_sql = "SELECT {keys}, {fields} FROM {target}"
    current = sql.SQL(current_sql).format(
        keys=keys, fields=fields, target=target_identifier(spec), markers=markers_identifier(spec)
    )
    key_eq = sql.SQL(" AND ").join(sql.SQL("c.{k} = n.{k}").format(k=ident(k)) for k in spec.key)
    key_text = sql.SQL("concat_ws('|', {})").format(
        sql.SQL(", ").join(sql.SQL("n.{}::text").format(ident(k)) for k in spec.key)
    )
    missing = sql.SQL("c.{} IS NULL").format(ident(spec.key[0]))
    stale = sql.SQL(
        "c.{k0} IS NOT NULL AND (c._kafka_topic, c._kafka_partition, c._kafka_offset) IS DISTINCT FROM "
        "(n._kafka_topic, n._kafka_partition, n._kafka_offset) AND NOT coalesce({current_newer}, false)"
    ).format(k0=ident(spec.key[0]), current_newer=spec.ordering.newer_sql(n, c))
    # The example keys are picked (numbered per verdict) before they are aggregated: a window where
    # most keys are wrong must not aggregate them all (PostgreSQL's 1 GB array limit).
    return sql.SQL(
        "WITH n AS ({newest}), c AS ({current}), "
        "j AS (SELECT n._kafka_topic, n._kafka_partition, {key_text} AS _key, {missing} AS _missing, "
        "{stale} AS _stale FROM n LEFT JOIN c ON {key_eq}), "
        "r AS (SELECT *, row_number() OVER (PARTITION BY _kafka_topic, _kafka_partition, _missing, _stale "
        "ORDER BY _key) AS _n FROM j) "
        "SELECT _kafka_topic, _kafka_partition, count(*), count(*) FILTER (WHERE _missing), "
        "count(*) FILTER (WHERE _stale), array_agg(_key ORDER BY _key) FILTER (WHERE _missing AND _n <= {ex}), "
        "array_agg(_key ORDER BY _key) FILTER (WHERE _stale AND _n <= {ex}) FROM r GROUP BY 1, 2"
    ).format(
        newest=newest, current=current, missing=missing, stale=stale, key_text=key_text,
        ex=sql.Literal(EXAMPLE_KEYS), key_eq=key_eq,
    )  # fmt: skip
