"""The commit's part of Debezium's left-out values (:mod:`reprocess.spark.left_out` did what the
run's records could): the values the range could not give, found in what Postgres holds, before
the merge reads the stage; and the values nobody could give, recorded as incomplete after it.

Where a listed value is looked up, in order (each step only fills what is still listed):

1. a row whose segment began before the range (no old key): the target's stored row of its key
   (a rebuild's shadow table, then the live table), else — the key was moved away by a
   primary-key change and the connector re-sent its earlier events — the values its latest
   change moved (``reprocess.moved_values``);
2. a row moved from an old key: the values an earlier commit kept of that very change
   (``reprocess.moved_values``: a batch cut between the delete and the create, or a re-sent
   copy), else the stage's ``moved`` row of that change (the old key's delete with its values),
   else the target's stored row of the old key on the row's own partition (the same commit
   deletes it after the merge); repeated, so a chain of changes inside the range (1 → 2 → 3)
   resolves link by link. A row whose stored row's value is incomplete with a link takes that
   link first (its segment began with that change in an earlier commit);
3. a replayed row whose stored row is the same record: the stored value (a replay after the
   records with the full value left the topic writes nothing);
4. a rebuild: the live table's row of the key.

What is still listed is written NULL and recorded in ``reprocess.incomplete_values`` (key,
column, the record that left it out, and the link it still follows), counted in the run; a later
record of the key that sends the value clears it, and so does the commit that keeps the linked
change's values (:mod:`reprocess.postgres.linked_values`): on a topic of several partitions the
new key's create may be committed before the old key's last events and delete, which sit on
another partition. The fix is the source's: ``REPLICA IDENTITY FULL`` and a new snapshot.
"""

from __future__ import annotations

from typing import Any, Final

from psycopg2 import sql

from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import MOVED, MOVED_AT, NEW_KEY, OLD_AT, OLD_KEY, ROW, ROW_KEY, TOMBSTONE, UNCHANGED
from reprocess.postgres.linked_values import (
    INCOMPLETE,
    MOVED_VALUES,
    digest,
    fill_linked,
    incomplete_of,
    key_object,
    same_key,
    take_links,
    typed_key,
)
from reprocess.postgres.moved_values import digest_moved_values
from reprocess.postgres.target import target_identifier

FIX: Final = (  # an incomplete value's reason, and the fix
    "the connector left the value out (an unchanged TOASTed value under REPLICA IDENTITY DEFAULT) and no record "
    "in the run's range, no stored row and no moved key held it: set REPLICA IDENTITY FULL on the source table "
    "and have the connector re-snapshot it (or replay a range that holds the row's full value)"
)
_ident = sql.Identifier


def resolve(cur: Any, spec: PipelineSpec, stage: sql.Composable, owner: str, *, live: PipelineSpec | None) -> None:
    """Fill the stage's listed values from Postgres (the module's steps). ``spec`` is the table the
    run writes (a rebuild's shadow spec) and ``owner`` whose incomplete values it holds; ``live``
    the live pipeline's spec of a rebuild. A stored row's incomplete value is no value: it stays
    listed."""
    digest_moved_values(cur, spec, owner)
    listed = sql.SQL("_s.{} IS NOT NULL").format(_ident(UNCHANGED))
    valued = sql.SQL("_s._kind IN ({}, {})").format(sql.Literal(ROW), sql.Literal(MOVED))
    own = sql.SQL("{} AND {} AND _s.{} IS NULL").format(valued, listed, _ident(OLD_KEY))
    before = _stored_before(spec)
    stored = [(spec, owner, before), (live, live.name, sql.SQL(""))] if live is not None else [(spec, owner, before)]
    for table, holder, older in stored:  # 1. the segment began before the range
        match = sql.SQL("{}{}").format(same_key(spec, "_s"), older)
        cur.execute(_fill(spec, stage, _stored_row(table, holder, stage, own, match), own))
    cur.execute(_fill(spec, stage, _moved_away(spec, stage, owner, own), own))
    cur.execute(take_links(spec, stage, owner, own, before))
    moved = sql.SQL("{} AND {} AND _s.{} IS NOT NULL").format(valued, listed, _ident(OLD_KEY))
    unmatched = sql.SQL("{} AND NOT EXISTS (SELECT 1 FROM {} AS _m WHERE {})").format(moved, stage, _links("_m"))
    for _ in range(_count(cur, stage, moved) + 1):  # 2. one link of a chain per round
        filled = 0
        for source, where in (  # a kept copy of the change was staged before any copy in this stage
            (_kept_change(spec, stage, owner, moved), moved),
            (_moved_row(stage, moved), moved),
            (
                _stored_row(
                    spec, owner, stage, unmatched, sql.SQL("{}{}{}").format(_old_key(spec), before, _SAME_PARTITION)
                ),
                unmatched,
            ),
        ):
            cur.execute(_fill(spec, stage, source, where))
            filled += cur.rowcount
        if filled == 0:
            break
    same = sql.SQL("{} AND {}").format(valued, listed)
    same_record = _stored_row(spec, owner, stage, same, same_key(spec, "_s"), same_record=True)
    cur.execute(_fill(spec, stage, same_record, same))  # 3.
    if live is not None:  # 4.
        cur.execute(_fill(spec, stage, _stored_row(live, live.name, stage, same, same_key(spec, "_s")), same))


def _stored_before(spec: PipelineSpec) -> sql.Composed:
    """A stored row is the state before a stage row only when it is not newer (a replay's target
    may hold a later life of the key: a re-insert after a move)."""
    return sql.SQL(" AND NOT {}").format(spec.ordering.newer_sql(sql.Identifier("_s"), sql.Identifier("_t")))


# The old key's stored row is the state before a create of the new key only on the same partition:
# two partitions hold no order between them, so a stored row on another may predate the old key's
# last updates (a later batch or run holds them and the change's delete): the value stays listed,
# linked to the change, until a commit holds it (:mod:`reprocess.postgres.linked_values`).
_SAME_PARTITION: Final = sql.SQL(" AND (_t._kafka_topic, _t._kafka_partition) = (_s._kafka_topic, _s._kafka_partition)")


def _count(cur: Any, stage: sql.Composable, where: sql.Composable) -> int:
    cur.execute(sql.SQL("SELECT count(*) FROM {} AS _s WHERE {}").format(stage, where))
    return int(cur.fetchone()[0])


def _listed(column: str, alias: str) -> sql.Composed:
    return sql.SQL("coalesce({} = ANY(string_to_array({}.{}, ',')), false)").format(
        sql.Literal(column), _ident(alias), _ident(UNCHANGED)
    )


def _fill(spec: PipelineSpec, stage: sql.Composable, source: sql.Composable, where: sql.Composable) -> sql.Composed:
    """UPDATE the stage rows ``where`` holds: each listed value that ``source`` (a query of
    ``_row`` = a stage row's ctid, plus the value columns and their own ``_unchanged``) holds is
    taken from it; only rows where it fills at least one."""
    columns = spec.unchanged_columns
    fills = [sql.SQL("{} AND NOT {}").format(_listed(c, "_s"), _listed(c, "_f")) for c in columns]
    still = [
        sql.SQL("CASE WHEN {} AND {} THEN {} END").format(_listed(c, "_s"), _listed(c, "_f"), sql.Literal(c))
        for c in columns
    ]
    return sql.SQL(
        "UPDATE {stage} AS _s SET {sets}, {unchanged} = nullif(concat_ws(',', {still}), '') "
        "FROM ({source}) AS _f WHERE _s.ctid = _f._row AND {where} AND ({any})"
    ).format(
        stage=stage,
        sets=sql.SQL(", ").join(
            sql.SQL("{c} = CASE WHEN {fill} THEN _f.{c} ELSE _s.{c} END").format(c=_ident(c), fill=fill)
            for c, fill in zip(columns, fills, strict=True)
        ),
        unchanged=_ident(UNCHANGED),
        still=sql.SQL(", ").join(still),
        source=source,
        where=where,
        any=sql.SQL(" OR ").join(fills),
    )


def _old_key(spec: PipelineSpec) -> sql.Composed:
    """The stored row's key equals the stage row's old key (its JSON text, :mod:`reprocess.spark.left_out`)."""
    return sql.SQL(" AND ").join(
        sql.SQL("_t.{k} = (jsonb_populate_record(NULL::{t}, _s.{old}::jsonb)).{k}").format(
            k=_ident(k), t=target_identifier(spec), old=_ident(OLD_KEY)
        )
        for k in spec.key
    )


def _stored_row(
    table: PipelineSpec,
    owner: str,
    stage: sql.Composable,
    where: sql.Composable,
    match: sql.Composable,
    *,
    same_record: bool = False,
) -> sql.Composed:
    """The stage rows ``where`` holds with the stored row of ``table`` that ``match`` finds, listing
    its incomplete values (``owner``'s)."""
    lineage = (
        sql.SQL(" AND (_t._kafka_topic, _t._kafka_partition, _t._kafka_offset) = "
                "(_s._kafka_topic, _s._kafka_partition, _s._kafka_offset)")
        if same_record
        else sql.SQL("")
    )  # fmt: skip
    return sql.SQL(
        "SELECT _s.ctid AS _row, {values}, (SELECT string_agg(_i.\"column\", ',') FROM {incomplete} AS _i "
        "WHERE _i.pipeline = {owner} AND {key}) AS {unchanged} FROM {stage} AS _s "
        "JOIN {table} AS _t ON {match}{lineage} WHERE {where}"
    ).format(
        incomplete=INCOMPLETE,
        owner=sql.Literal(owner),
        key=incomplete_of(key_object(table, "_t")),
        stage=stage,
        where=where,
        values=sql.SQL(", ").join(sql.SQL("_t.{}").format(_ident(c)) for c in table.unchanged_columns),
        unchanged=_ident(UNCHANGED),
        table=target_identifier(table),
        match=match,
        lineage=lineage,
    )


def _links(moved: str) -> sql.Composed:
    """The stage row ``moved`` is the delete of the primary-key change that made stage row ``_s``."""
    return sql.SQL(
        "{m}._kind = {kind} AND {m}.{row_key} = _s.{old} AND {m}.{new} = _s.{row_key} "
        "AND {m}.{at} IS NOT DISTINCT FROM _s.{old_at}"
    ).format(
        m=_ident(moved),
        kind=sql.Literal(MOVED),
        row_key=_ident(ROW_KEY),
        old=_ident(OLD_KEY),
        new=_ident(NEW_KEY),
        at=_ident(MOVED_AT),
        old_at=_ident(OLD_AT),
    )


def _moved_row(stage: sql.Composable, where: sql.Composable) -> sql.Composed:
    """Per stage row moved from an old key, the stage's delete of that same change (:func:`_links`):
    of its copies, one before the row on its partition if there is one (two partitions hold no
    order between them), and of those the first (:func:`_latest_change`)."""
    return sql.SQL(
        "SELECT DISTINCT ON (_s.ctid) _s.ctid AS _row, _m.* FROM {stage} AS _s JOIN {stage} AS _m ON {links} "
        "WHERE {where} ORDER BY _s.ctid, "
        "(_m._kafka_partition = _s._kafka_partition AND _m._kafka_offset < _s._kafka_offset) DESC, {latest}"
    ).format(stage=stage, links=_links("_m"), where=where, latest=_latest_change("_m"))


def _latest_change(moved: str) -> sql.Composed:
    """ORDER BY of moved rows: the latest change first (its commit time), and of a change the
    connector sent twice after a restart the first copy: a re-sent delete may come after the old
    key's next life began (a re-key onto it), so only the first holds the values it moved."""
    return sql.SQL("{m}.{at}::bigint DESC NULLS LAST, {m}._kafka_partition, {m}._kafka_offset").format(
        m=_ident(moved), at=_ident(MOVED_AT)
    )


def _kept(
    spec: PipelineSpec,
    stage: sql.Composable,
    owner: str,
    where: sql.Composable,
    match: sql.Composable,
    *,
    latest: bool = False,
) -> sql.Composed:
    """The stage rows ``where`` holds with the values of ``owner``'s kept change (``_mv``,
    :func:`keep_moved_values`) that ``match`` finds, as the target's typed columns; with
    ``latest``, of several the latest change."""
    return sql.SQL(
        "SELECT {distinct}_s.ctid AS _row, {columns}, _mv.unchanged AS {unchanged} FROM {stage} AS _s "
        "JOIN {moved} AS _mv ON _mv.pipeline = {owner} AND {match} "
        'CROSS JOIN LATERAL jsonb_populate_record(NULL::{target}, _mv."values") AS _v WHERE {where}{order}'
    ).format(
        distinct=sql.SQL("DISTINCT ON (_s.ctid) " if latest else ""),
        columns=sql.SQL(", ").join(sql.SQL("_v.{}").format(_ident(c)) for c in spec.unchanged_columns),
        unchanged=_ident(UNCHANGED),
        stage=stage,
        moved=MOVED_VALUES,
        owner=sql.Literal(owner),
        match=match,
        target=target_identifier(spec),
        where=where,
        order=sql.SQL(
            " ORDER BY _s.ctid, nullif(_mv.moved_at, '')::bigint DESC NULLS LAST, _mv.partition, _mv.\"offset\""
            if latest
            else ""
        ),
    )


def _kept_change(spec: PipelineSpec, stage: sql.Composable, owner: str, where: sql.Composable) -> sql.Composed:
    """The stage rows moved from an old key with the values an earlier commit kept of that same
    change (old key, new key and commit time are the change's), found by the keys' digests first
    (the index sql/019 left on ``(pipeline, md5(old_key), md5(new_key), moved_at)``)."""
    match = sql.SQL(
        "md5(_mv.old_key) = md5(_s.{old}) AND md5(_mv.new_key) = md5(_s.{row_key}) "
        "AND _mv.old_key = _s.{old} AND _mv.new_key = _s.{row_key} AND _mv.moved_at = coalesce(_s.{at}, '')"
    ).format(old=_ident(OLD_KEY), row_key=_ident(ROW_KEY), at=_ident(OLD_AT))
    return _kept(spec, stage, owner, where, match)


def _moved_away(spec: PipelineSpec, stage: sql.Composable, owner: str, where: sql.Composable) -> sql.Composed:
    """The stage rows with the values the latest kept change of their own key moved away (the old
    key's text as the Spark job wrote it, compared as the target's typed key; by its digest first,
    ``old_digest``, indexed by sql/028)."""
    old_key, key = typed_key(spec, sql.SQL("_mv.old_key")), key_object(spec, "_s")
    match = sql.SQL("_mv.old_digest = {} AND {} = {}").format(digest(key), old_key, key)
    return _kept(spec, stage, owner, where, match, latest=True)


def keep_moved_values(cur: Any, spec: PipelineSpec, stage: sql.Composable, owner: str, run_id: str) -> None:
    """After the merge: keep each primary-key change's moved values (the stage's ``moved`` rows,
    resolved), so the create of the new key in a later run — a batch cut between the two events,
    or a copy the connector re-sent after a restart — still finds them (step 2), whatever the old
    key became since. Of a change the connector sent twice, the first copy holds the values (a
    re-sent delete may come after the old key's next life began): an earlier copy replaces a
    later one, and the same copy replaces itself only when it now knows every value. A change's
    values still unknown keep the link they follow (``from_key``/``from_at``)."""
    values = sql.SQL(", ").join(sql.SQL("{}, _s.{}").format(sql.Literal(c), _ident(c)) for c in spec.unchanged_columns)
    cur.execute(
        sql.SQL(
            'INSERT INTO {moved} AS _mv (pipeline, old_key, new_key, moved_at, topic, partition, "offset", "values", '
            "unchanged, run_id, from_key, from_at, old_digest, new_digest) "
            "SELECT DISTINCT ON (_s.{row_key}, _s.{new}, coalesce(_s.{at}, '')) "
            "%(owner)s, _s.{row_key}, _s.{new}, coalesce(_s.{at}, ''), _s._kafka_topic, _s._kafka_partition, "
            "_s._kafka_offset, jsonb_build_object({values}), _s.{unchanged}, %(run_id)s, _s.{old}, _s.{old_at}, "
            "{old_digest}, {new_digest} "
            "FROM {stage} AS _s WHERE _s._kind = {kind} "
            "ORDER BY _s.{row_key}, _s.{new}, coalesce(_s.{at}, ''), _s._kafka_partition, _s._kafka_offset "
            "ON CONFLICT (pipeline, md5(old_key), md5(new_key), moved_at) DO UPDATE SET topic = EXCLUDED.topic, "
            'partition = EXCLUDED.partition, "offset" = EXCLUDED."offset", "values" = EXCLUDED."values", '
            "unchanged = EXCLUDED.unchanged, run_id = EXCLUDED.run_id, from_key = EXCLUDED.from_key, "
            "from_at = EXCLUDED.from_at "
            'WHERE (EXCLUDED.partition, EXCLUDED."offset") < (_mv.partition, _mv."offset") '
            'OR ((EXCLUDED.partition, EXCLUDED."offset") = (_mv.partition, _mv."offset") '
            "AND _mv.unchanged IS NOT NULL AND EXCLUDED.unchanged IS NULL)"
        ).format(
            moved=MOVED_VALUES,
            row_key=_ident(ROW_KEY),
            new=_ident(NEW_KEY),
            at=_ident(MOVED_AT),
            values=values,
            unchanged=_ident(UNCHANGED),
            stage=stage,
            kind=sql.Literal(MOVED),
            old=_ident(OLD_KEY),
            old_at=_ident(OLD_AT),
            old_digest=digest(typed_key(spec, sql.SQL("_s.{}").format(_ident(ROW_KEY)))),
            new_digest=digest(typed_key(spec, sql.SQL("_s.{}").format(_ident(NEW_KEY)))),
        ),
        {"owner": owner, "run_id": run_id},
    )


def record_incomplete(cur: Any, spec: PipelineSpec, stage: sql.Composable, owner: str, run_id: str) -> int:
    """After the merge and the deletes: the incomplete values of the keys whose stored row is now
    this stage's row are exactly the ones it lists, with the link each follows; a deleted key has
    none. Then what is linked to a change this commit kept is filled in
    (:func:`reprocess.postgres.linked_values.fill_linked`). Returns how many values of the stored
    rows this stage made are still incomplete."""
    current = sql.SQL(
        "(SELECT _s.* FROM {stage} AS _s JOIN {target} AS _t ON {same_key} AND (_t._kafka_topic, "
        "_t._kafka_partition, _t._kafka_offset) = (_s._kafka_topic, _s._kafka_partition, _s._kafka_offset) "
        "WHERE _s._kind = {row}) AS _s"
    ).format(stage=stage, target=target_identifier(spec), same_key=same_key(spec, "_s"), row=sql.Literal(ROW))
    key = key_object(spec, "_s")
    params = {"owner": owner, "run_id": run_id, "reason": FIX}
    cur.execute(
        sql.SQL(
            "DELETE FROM {incomplete} AS _i USING {current} WHERE _i.pipeline = %(owner)s AND {key} "
            "AND NOT coalesce(_i.\"column\" = ANY(string_to_array(_s.{unchanged}, ',')), false)"
        ).format(incomplete=INCOMPLETE, current=current, key=incomplete_of(key), unchanged=_ident(UNCHANGED)),
        params,
    )
    cur.execute(
        sql.SQL(
            'INSERT INTO {incomplete} AS _i (pipeline, key, "column", topic, partition, "offset", run_id, reason, '
            "old_key, old_at) SELECT %(owner)s, {key}, _c, _s._kafka_topic, _s._kafka_partition, _s._kafka_offset, "
            "%(run_id)s, %(reason)s, _s.{old}, _s.{old_at} "
            "FROM {current} CROSS JOIN LATERAL unnest(string_to_array(_s.{unchanged}, ',')) AS _c "
            'ON CONFLICT (pipeline, md5(key::text), "column") DO UPDATE SET topic = EXCLUDED.topic, '
            'partition = EXCLUDED.partition, "offset" = EXCLUDED."offset", run_id = EXCLUDED.run_id, '
            "old_key = EXCLUDED.old_key, old_at = EXCLUDED.old_at "
            'WHERE (_i.topic, _i.partition, _i."offset", _i.old_key, _i.old_at) IS DISTINCT FROM '
            '(EXCLUDED.topic, EXCLUDED.partition, EXCLUDED."offset", EXCLUDED.old_key, EXCLUDED.old_at)'
        ).format(
            incomplete=INCOMPLETE,
            key=key,
            current=current,
            unchanged=_ident(UNCHANGED),
            old=_ident(OLD_KEY),
            old_at=_ident(OLD_AT),
        ),
        params,
    )
    cur.execute(
        sql.SQL(
            "DELETE FROM {incomplete} AS _i USING {stage} AS _s WHERE _i.pipeline = %(owner)s "
            "AND _s._kind = {tombstone} AND {key} AND NOT EXISTS (SELECT 1 FROM {target} AS _t WHERE {same})"
        ).format(
            incomplete=INCOMPLETE,
            stage=stage,
            tombstone=sql.Literal(TOMBSTONE),
            key=incomplete_of(key),
            target=target_identifier(spec),
            same=same_key(spec, "_s"),
        ),
        params,
    )
    fill_linked(cur, spec, stage, owner, run_id)
    cur.execute(
        sql.SQL(
            "SELECT count(*) FROM {current} JOIN {incomplete} AS _i ON _i.pipeline = %(owner)s AND {key} "
            'AND (_i.topic, _i.partition, _i."offset") = (_s._kafka_topic, _s._kafka_partition, _s._kafka_offset)'
        ).format(current=current, incomplete=INCOMPLETE, key=incomplete_of(key)),
        params,
    )
    return int(cur.fetchone()[0])
