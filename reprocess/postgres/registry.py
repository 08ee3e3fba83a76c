"""Who may register a spec under a pipeline's name: the checks before a changed spec is accepted.

The ledger, the committed ranges and the deletion markers say what a pipeline's target holds,
and they are keyed by the pipeline's name. A spec change that makes them describe something
else would leave rows wrong while reconciliation stays green, so it is refused here, under the
pipeline's lock and before the new spec is written to ``reprocess.pipelines``:

- a target table (or a bookkeeping schema) that another pipeline owns: ordering across two
  pipelines compares topic names, one's deletion markers do not stop the other's replays, and a
  rebuild of one swaps out the other's rows;
- a changed ``target_table`` while the ledger has positions: the new table would start empty
  under a ledger that says everything is committed;
- a changed topic set or ordering rule: stored rows were chosen by the old rule, and offsets of
  two topics (or two incarnations of one) share no order. A rebuild re-derives every row from
  the log and is always allowed; under column ordering the change may also be acknowledged
  (``acknowledge_partition_change``), as a partition-count change is;
- a changed ``tombstones`` rule: under ``delete`` the deletion markers keep replays from
  resurrecting deleted keys, and the stored rows say nothing of the tombstones loaded as dead
  letters before; a switch either way needs a rebuild, as an ordering switch does;
- a changed ``format``, ``encoding``, ``schema_registry`` connection or derivation of the ordering
  column (its ``path``, e.g. ``$source.lsn`` → ``$source.ts_ms``, its ``expr``, or the
  ``transform:`` that may rewrite it, unless both the old and the new function declare what they
  set with ``transform_derives``, which never names it): the same records would decode
  to other rows, or order by values the stored ones cannot be compared with, while the ledger
  says they are loaded. Only a rebuild, which re-derives every row, may make it.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from sqlalchemy import Connection, text

from reprocess.core.errors import OrderingError, SchemaChangeError, SpecError
from reprocess.core.runs import RunMode
from reprocess.core.spec import DEFAULT_REGISTRY_CONN, PipelineSpec, TombstoneMode

log = logging.getLogger(__name__)

# Serialises two pipelines' first registration of one table (the pipeline lock is per name).
_TARGET_LOCK: Final = text("SELECT pg_advisory_xact_lock(hashtext('reprocess-target:' || :target))")
_OWNERS: Final = text(
    "SELECT name FROM reprocess.pipelines WHERE target_table = :target AND name <> :name ORDER BY name"
)
_REGISTERED: Final = text("SELECT target_table, spec FROM reprocess.pipelines WHERE name = :name")
_HAS_LEDGER: Final = text("SELECT EXISTS (SELECT 1 FROM reprocess.consumer_offsets WHERE pipeline = :name)")
_EXISTS: Final = text("SELECT to_regclass(:table) IS NOT NULL")


def check_registration(conn: Connection, spec: PipelineSpec, mode: RunMode, *, acknowledged: bool) -> list[str]:
    """Refuse a spec that would take another pipeline's table or change what the ledger describes.

    Runs in the caller's transaction, under the pipeline's lock, before the spec is registered.
    Returns warnings for the changes that were allowed (a rebuild, or an acknowledged change).

    Raises
    ------
    SpecError
        Another pipeline owns the target table.
    SchemaChangeError
        ``target_table`` changed while the ledger describes the old table.
    OrderingError
        The topic set or the ordering rule changed without a rebuild or an acknowledgement.
    """
    conn.execute(_TARGET_LOCK, {"target": spec.qualified_target})
    owners = list(conn.execute(_OWNERS, {"target": spec.qualified_target, "name": spec.name}).scalars())
    if owners:
        raise SpecError(
            f"{spec.source_file}: field 'target_table': {spec.qualified_target} belongs to pipeline "
            f"{owners[0]!r}; two pipelines cannot share a target (their ledgers, ordering and deletion markers "
            "are per pipeline, and a rebuild of one would swap out the other's rows). Nothing was changed. "
            f"Give {spec.name!r} its own target_table, or, if it replaces {owners[0]!r}, keep the name {owners[0]!r}.",
            pipeline=spec.name,
        )
    registered = conn.execute(_REGISTERED, {"name": spec.name}).one_or_none()
    if registered is None or not conn.execute(_HAS_LEDGER, {"name": spec.name}).scalar_one():
        return []
    old_target: str = registered.target_table
    old: dict[str, Any] = registered.spec
    if old_target != spec.qualified_target and not _moved(conn, old_target, spec.qualified_target):
        raise SchemaChangeError(
            f"{spec.name}: spec {spec.source_file} changes target_table from {old_target} to "
            f"{spec.qualified_target}, but the pipeline's ledger and committed ranges describe {old_target}: the "
            "new table would start empty while every committed offset counts as loaded. Nothing was changed. "
            f"Move the table so it keeps its rows (ALTER TABLE {old_target} SET SCHEMA … / RENAME TO …, until "
            f"it is {spec.qualified_target}), or revert target_table.",
            pipeline=spec.name,
        )
    decoding = _decoding_changes(old, spec)
    rebuild = mode is RunMode.REBUILD
    if decoding and not rebuild:
        raise SchemaChangeError(
            f"{spec.name}: spec {spec.source_file} changes {'; '.join(decoding)}, with committed positions: the "
            "records already loaded would decode (or order) differently from the rows stored from them, and "
            "replays would compare values of two kinds. Nothing was planned. Revert the change, or rebuild the "
            f"table from the log with the new spec: trigger {spec.dag_id('backfill')} with mode=rebuild (Safety "
            "section); to keep the old table, give the new spec its own name and target_table.",
            pipeline=spec.name,
        )
    changes = []
    if sorted(old.get("topics", [])) != sorted(spec.topics):
        changes.append(f"topics {old.get('topics')} → {list(spec.topics)}")
    old_ordering = old.get("ordering", {"mode": "offset", "column": None})
    new_ordering = spec.as_dict()["ordering"]
    if old_ordering != new_ordering:
        changes.append(f"ordering {_ordering_text(old_ordering)} → {_ordering_text(new_ordering)}")
    if not changes:
        return (
            [f"{spec.name}: spec {spec.source_file} changes {'; '.join(decoding)}: the rebuild re-derives every row"]
            if decoding
            else []
        )
    what = f"{spec.name}: spec {spec.source_file} changes {'; '.join(changes + decoding)}"
    if rebuild:
        return [f"{what}: the rebuild re-derives every row from the log"]
    if spec.ordering.column is not None and acknowledged:
        return [f"{what} (acknowledged): rows stored under the old rule keep their record until a newer one comes"]
    remedy = f"rebuild the table from the log: trigger {spec.dag_id('backfill')} with mode=rebuild (Safety section)"
    if spec.ordering.column is not None:
        remedy += (
            f", or, if every stored row already holds {spec.ordering.column} and the new topics continue the old "
            "ones' history, run a backfill with acknowledge_partition_change=true"
        )
    raise OrderingError(
        f"{what}, with committed positions: the stored rows were chosen by the old rule, and offsets of "
        "different topics share no order, so replays and new records could lose to rows they should replace. "
        f"Nothing was planned. To go ahead, {remedy}.",
        pipeline=spec.name,
    )


def _decoding_changes(old: dict[str, Any], spec: PipelineSpec) -> list[str]:
    """How the spec decodes records differently from the registered one (``old``, its ``as_dict``;
    a spec registered before formats existed was json), a tombstone's decoding (a delete or a dead
    letter) included."""
    new = spec.as_dict()
    fields = [("format", "json"), ("encoding", "json"), ("tombstones", TombstoneMode.DEAD_LETTER.value)]
    if spec.needs_registry:  # another registry numbers its schemas otherwise
        fields.append(("schema_registry", DEFAULT_REGISTRY_CONN))
    out = [f"{f} {old.get(f, d)!r} → {new[f]!r}" for f, d in fields if old.get(f, d) != new[f]]
    column = spec.ordering.column
    if column is not None and old.get("ordering", {}).get("column") == column:
        out += _ordering_derivation_changes(column, old, new)
    return out


def _ordering_derivation_changes(column: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """How the ordering column's value is derived differently: its ``path``, its ``expr``, or (with
    a ``transform:`` that may rewrite it: one without ``transform_derives``, before or after the
    change) the function or its version; a type change is refused
    as any column's is (evolve.py: it cannot be applied in place). Stored rows keep values of the
    old derivation, which newer records would be compared with (a new scale makes every later
    record lose), so only a rebuild may make such a change."""
    before, after = old.get("columns", {}).get(column, {}), new["columns"][column]
    out = []
    for field in ("path", "expr"):
        was, now = _derived_by(before, field, column), _derived_by(after, field, column)
        if was != now:
            out.append(f"the ordering column {column!r}'s {field} {was!r} → {now!r}")
    if not (_may_set(old, column) or _may_set(new, column)):
        return out  # each function declares what it sets, the ordering column not among it: rows re-derive in place
    why = (
        f"the new function may derive the ordering column {column!r}: if it does not, declare what it sets with "
        "transform_derives"
        if _may_set(new, column)
        else f"the old function declared nothing, so the stored rows' ordering column {column!r} may hold values it set"
    )
    for field in ("transform", "transform_version"):
        if old.get(field) != new[field]:
            out.append(f"{field} {old.get(field)!r} → {new[field]!r} ({why})")
    return out


def _may_set(spec: dict[str, Any], column: str) -> bool:
    """Whether a registered spec's transform may set ``column``: it has one, and it does not declare
    what it sets (``transform_derives``, which the parser keeps the ordering column out of) or names it."""
    derives = spec.get("transform_derives")
    return spec.get("transform") is not None and (derives is None or column in derives)


def _derived_by(stored: dict[str, Any], field: str, column: str) -> str | None:
    """A column's ``path`` or ``expr`` as registered (``as_dict`` keeps a ``path`` only for a column
    without an ``expr``; a column registered with neither read its own name)."""
    if field == "path":
        return None if "expr" in stored else stored.get("path", column)
    return stored.get(field)


def _moved(conn: Connection, old_target: str, new_target: str) -> bool:
    """The user moved the table (the old name is gone, the new one exists): the ledger still fits it."""
    gone = not conn.execute(_EXISTS, {"table": old_target}).scalar_one()
    return gone and bool(conn.execute(_EXISTS, {"table": new_target}).scalar_one())


def _ordering_text(ordering: dict[str, Any]) -> str:
    return str(ordering.get("column") or ordering.get("mode"))
