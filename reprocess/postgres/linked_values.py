"""Debezium left-out values linked to a primary-key change no commit held yet (review V, finding 2).

A key change's delete lands on the old key's partition and its create on the new key's. Two
partitions hold no order, and a batch takes the same offset count of each, so the new key's create
(leaving its large values out) can be committed before the old key's last updates and its delete.
Its value is then unknown, never the old key's stored row (:mod:`reprocess.postgres.left_out`,
step 2): the row is written NULL there and the value recorded incomplete with its link (the old
key and the change's commit time, ``reprocess.incomplete_values.old_key``/``old_at``). The key's
later rows carry the link on (:func:`take_links`); so does the change's kept values when the new
key changes again before (``reprocess.moved_values.from_key``/``from_at``: a chain 1 → 2 → 3).
The commit that keeps the change's values (:func:`fill_linked`) fills them all in.
"""

from __future__ import annotations

from typing import Any, Final

from psycopg2 import sql

from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import MOVED, OLD_AT, OLD_KEY, UNCHANGED
from reprocess.postgres.target import target_identifier

INCOMPLETE: Final = sql.SQL("reprocess.incomplete_values")
MOVED_VALUES: Final = sql.SQL("reprocess.moved_values")
_ident = sql.Identifier


def same_key(spec: PipelineSpec, alias: str) -> sql.Composed:
    """The stored row's key equals the stage row ``alias``'s own key."""
    return sql.SQL(" AND ").join(sql.SQL("_t.{k} = {a}.{k}").format(k=_ident(k), a=_ident(alias)) for k in spec.key)


def key_object(spec: PipelineSpec, alias: str) -> sql.Composed:
    """A row's key as jsonb, ``{"column": value}``: how an incomplete value names its row."""
    return sql.SQL("jsonb_build_object({})").format(
        sql.SQL(", ").join(sql.SQL("{}, {}.{}").format(sql.Literal(k), _ident(alias), _ident(k)) for k in spec.key)
    )


def incomplete_of(key: sql.Composable) -> sql.Composed:
    """The incomplete value ``_i`` names the row of ``key`` (:func:`key_object`): by its digest first,
    so the lookup uses the index on ``(pipeline, md5(key::text), column)`` (sql/019: a key's jsonb
    may exceed btree's row limit, its digest never does), then by the key itself."""
    return sql.SQL("md5(_i.key::text) = {digest} AND _i.key = {key}").format(digest=digest(key), key=key)


def digest(key: sql.Composable) -> sql.Composed:
    """A key's digest (:func:`key_object`'s md5), the form the bookkeeping tables index keys by."""
    return sql.SQL("md5(({})::text)").format(key)


def typed_key(spec: PipelineSpec, key_text: sql.Composable) -> sql.Composed:
    """A key's JSON text as the Spark job wrote it, as :func:`key_object` of the target's typed key."""
    return sql.SQL("jsonb_build_object({})").format(
        sql.SQL(", ").join(
            sql.SQL("{}, (jsonb_populate_record(NULL::{}, {}::jsonb)).{}").format(
                sql.Literal(k), target_identifier(spec), key_text, _ident(k)
            )
            for k in spec.key
        )
    )


def take_links(
    spec: PipelineSpec, stage: sql.Composable, owner: str, where: sql.Composable, before: sql.Composable
) -> sql.Composed:
    """The stage rows ``where`` holds (no link) that still list a value their stored row lacks
    with a link take that link: the row continues a segment that an earlier commit began with a
    primary-key change whose values it did not hold yet."""
    return sql.SQL(
        "UPDATE {stage} AS _s SET {old} = _i.old_key, {old_at} = _i.old_at FROM {target} AS _t, {incomplete} AS _i "
        "WHERE {where} AND {same_key}{before} AND _i.pipeline = {owner} AND {key} "
        "AND _i.old_key IS NOT NULL AND _i.\"column\" = ANY(string_to_array(_s.{unchanged}, ','))"
    ).format(
        stage=stage,
        old=_ident(OLD_KEY),
        old_at=_ident(OLD_AT),
        target=target_identifier(spec),
        incomplete=INCOMPLETE,
        where=where,
        same_key=same_key(spec, "_s"),
        before=before,
        owner=sql.Literal(owner),
        key=incomplete_of(key_object(spec, "_t")),
        unchanged=_ident(UNCHANGED),
    )


def _known(column: str, alias: str) -> sql.Composed:
    """``alias`` (a kept change) knows ``column``'s value."""
    return sql.SQL("NOT coalesce({} = ANY(string_to_array({}.unchanged, ',')), false)").format(
        sql.Literal(column), _ident(alias)
    )


def fill_linked(cur: Any, spec: PipelineSpec, stage: sql.Composable, owner: str, run_id: str) -> None:
    """After the changes this commit kept (``stage``'s moved rows; ``run_id``'s rows of
    ``reprocess.moved_values``): the kept changes of new keys that changed again, whose values
    link to one of them, take the values it knows (link by link along a chain); then the stored
    rows whose incomplete values link to any of them take those values, which are no longer
    incomplete."""
    columns = spec.unchanged_columns
    merged = sql.SQL("jsonb_build_object({})").format(
        sql.SQL(", ").join(
            sql.SQL('{n}, CASE WHEN {gap} AND {known} THEN _p."values" -> {n} ELSE _c."values" -> {n} END').format(
                n=sql.Literal(c), gap=sql.SQL("NOT {}").format(_known(c, "_c")), known=_known(c, "_p")
            )
            for c in columns
        )
    )
    still = sql.SQL("nullif(concat_ws(',', {}), '')").format(
        sql.SQL(", ").join(
            sql.SQL("CASE WHEN NOT {} AND NOT {} THEN {} END").format(_known(c, "_c"), _known(c, "_p"), sql.Literal(c))
            for c in columns
        )
    )
    fills = sql.SQL(" OR ").join(sql.SQL("(NOT {} AND {})").format(_known(c, "_c"), _known(c, "_p")) for c in columns)
    chain = sql.SQL(
        'UPDATE {moved} AS _c SET "values" = {merged}, unchanged = {still}, run_id = %(run_id)s FROM {moved} AS _p '
        "WHERE _p.pipeline = %(owner)s AND _p.run_id = %(run_id)s AND _c.pipeline = %(owner)s "
        "AND md5(_c.old_key) = md5(_p.new_key) AND _c.old_key = _p.new_key AND _c.from_key = _p.old_key "
        "AND coalesce(_c.from_at, '') = _p.moved_at AND _c.unchanged IS NOT NULL AND ({fills})"
    ).format(moved=MOVED_VALUES, merged=merged, still=still, fills=fills)
    params = {"owner": owner, "run_id": run_id}
    cur.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} AS _s WHERE _s._kind = {})").format(stage, sql.Literal(MOVED)))
    if not cur.fetchone()[0]:  # this commit kept no change
        return
    while True:  # one link of a chain per round; each fills a value, so it ends
        cur.execute(chain, params)
        if cur.rowcount == 0:
            break
    new_key = typed_key(spec, sql.SQL("_mv.new_key"))
    cur.execute(
        sql.SQL(
            'WITH _f AS (SELECT DISTINCT _i.key, _i."column", _mv."values" FROM {moved} AS _mv '
            "JOIN {incomplete} AS _i ON _i.pipeline = %(owner)s AND {linked} AND _i.old_key = _mv.old_key "
            "AND coalesce(_i.old_at, '') = _mv.moved_at "
            "WHERE _mv.pipeline = %(owner)s AND _mv.run_id = %(run_id)s "
            "AND NOT coalesce(_i.\"column\" = ANY(string_to_array(_mv.unchanged, ',')), false)), "
            "_done AS (DELETE FROM {incomplete} AS _i USING _f WHERE _i.pipeline = %(owner)s "
            'AND {done} AND _i."column" = _f."column") '
            'UPDATE {target} AS _t SET {sets} FROM (SELECT key, array_agg("column") AS columns, '
            '(array_agg("values"))[1] AS "values" FROM _f GROUP BY key) AS _g '
            'CROSS JOIN LATERAL jsonb_populate_record(NULL::{target}, _g."values") AS _v WHERE {key} = _g.key'
        ).format(
            moved=MOVED_VALUES,
            incomplete=INCOMPLETE,
            linked=incomplete_of(new_key),
            done=incomplete_of(sql.SQL("_f.key")),
            target=target_identifier(spec),
            sets=sql.SQL(", ").join(
                sql.SQL("{c} = CASE WHEN {n} = ANY(_g.columns) THEN _v.{c} ELSE _t.{c} END").format(
                    c=_ident(c), n=sql.Literal(c)
                )
                for c in columns
            ),
            key=key_object(spec, "_t"),
        ),
        params,
    )
