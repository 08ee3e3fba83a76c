"""Pruning ``reprocess.moved_values``: a primary-key change's kept values go once no row needs them;
and a rebuild's incomplete and moved values, which replace the live ones at its swap as its table does.

:func:`reprocess.postgres.left_out.keep_moved_values` keeps the values each change moved from its old
key to its new one, for a create of the new key staged after the delete (a batch cut between them,
or a copy the connector re-sent). They are needed while the new key's stored row may still be
derived from that change. They are not once the new key's row has been rewritten by a later record
of its own that left nothing out (its values are known without them), or the new key was deleted
after the change: kept for ever they grow with every key change, and every commit of the pipeline
scans them (review V finding 11). "Later" is Kafka order within the change's own partition: a record
of the new key before the change (its earlier life, ended by a delete the change re-keys onto) must
not prune it, and records of two partitions hold no order, so such a change stays kept.
"""

from __future__ import annotations

from typing import Any, Final

from psycopg2 import sql
from sqlalchemy import Connection, text

from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import MOVED, OLD_KEY, ROW, TOMBSTONE, UNCHANGED
from reprocess.postgres.linked_values import MOVED_VALUES, digest, key_object, typed_key
from reprocess.postgres.target import target_identifier

_FORGET: Final = text(
    "DELETE FROM reprocess.incomplete_values WHERE pipeline = :owner; "
    "DELETE FROM reprocess.moved_values WHERE pipeline = :owner"
)
_ADOPT: Final = text(
    "DELETE FROM reprocess.incomplete_values WHERE pipeline = :pipeline; "
    "UPDATE reprocess.incomplete_values SET pipeline = :pipeline WHERE pipeline = :owner; "
    "DELETE FROM reprocess.moved_values WHERE pipeline = :pipeline; "
    "UPDATE reprocess.moved_values SET pipeline = :pipeline WHERE pipeline = :owner"
)


def forget_left_out(conn: Connection, owner: str) -> None:
    """Drop ``owner``'s incomplete and moved values (a shadow's, when a new rebuild starts)."""
    conn.execute(_FORGET, {"owner": owner})


def adopt_left_out(conn: Connection, pipeline: str, owner: str) -> None:
    """At a swap: ``owner``'s (the shadow's) incomplete and moved values replace ``pipeline``'s."""
    conn.execute(_ADOPT, {"pipeline": pipeline, "owner": owner})


def digest_moved_values(cur: Any, spec: PipelineSpec, owner: str) -> None:
    """Give ``owner``'s kept changes that lack them their keys' digests (``old_digest``,
    ``new_digest``: of the keys as the target's typed keys, :func:`~reprocess.postgres.linked_values.typed_key`),
    by which the commit finds them: the rows kept before sql/028, which cannot know the key types.
    Once each pipeline's first commit since has done it, this finds nothing (a partial index)."""
    old_key, new_key = (typed_key(spec, sql.SQL("_mv.{}").format(sql.Identifier(k))) for k in ("old_key", "new_key"))
    cur.execute(
        sql.SQL(
            "UPDATE {moved} AS _mv SET old_digest = {old}, new_digest = {new} "
            "WHERE _mv.pipeline = %(owner)s AND _mv.new_digest IS NULL"
        ).format(moved=MOVED_VALUES, old=digest(old_key), new=digest(new_key)),
        {"owner": owner},
    )


def prune_moved_values(cur: Any, spec: PipelineSpec, stage: sql.Composable, owner: str) -> int:
    """After the merge and the deletes (the stage ``stage`` of table ``spec``, ``owner``'s moved
    values): delete the kept changes whose new key this stage rewrote with every value known (a stage
    row of the key's own, no old key, nothing listed, now the stored row) or deleted (a tombstone, or
    the delete of a key change, and no stored row left), by a record after the change on the change's
    partition. Returns how many went."""
    ident = sql.Identifier
    target = target_identifier(spec)
    key = key_object(spec, "_s")  # the new key's text as the Spark job wrote it, as the target's typed key
    new_key = sql.SQL("_mv.new_digest = {} AND {} = {}").format(
        digest(key), typed_key(spec, sql.SQL("_mv.new_key")), key
    )
    same_key = sql.SQL(" AND ").join(sql.SQL("_t.{k} = _s.{k}").format(k=ident(k)) for k in spec.key)
    cur.execute(
        sql.SQL(
            "DELETE FROM {moved} AS _mv USING {stage} AS _s WHERE _mv.pipeline = %(owner)s AND {new_key} "
            "AND (_s._kafka_topic, _s._kafka_partition) = (_mv.topic, _mv.partition) "
            'AND _s._kafka_offset > _mv."offset" AND ('
            "(_s._kind = {row} AND _s.{old} IS NULL AND _s.{unchanged} IS NULL AND EXISTS (SELECT 1 FROM {target} "
            "AS _t WHERE {same_key} AND (_t._kafka_topic, _t._kafka_partition, _t._kafka_offset) = "
            "(_s._kafka_topic, _s._kafka_partition, _s._kafka_offset))) "
            "OR (_s._kind IN ({tombstone}, {moved_kind}) AND NOT EXISTS (SELECT 1 FROM {target} AS _t "
            "WHERE {same_key})))"
        ).format(
            moved=MOVED_VALUES,
            stage=stage,
            new_key=new_key,
            row=sql.Literal(ROW),
            old=ident(OLD_KEY),
            unchanged=ident(UNCHANGED),
            target=target,
            same_key=same_key,
            tombstone=sql.Literal(TOMBSTONE),
            moved_kind=sql.Literal(MOVED),
        ),
        {"owner": owner},
    )
    return int(cur.rowcount)
