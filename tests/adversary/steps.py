"""Steps beyond runs (issue 56): what each changes and what the oracle must then hold, written out
from the docs (concepts/transforms.md, spec-changes.md, plan-apply.md, reset-rebuild.md), not from the
product's code. The driver side is ``step_runs``; nothing here imports the product.

- ``rebuild``: the whole log read again into a shadow and swapped in: the table is the newest kept
  record per key over every record, the ledger the log end, the dead letters those of every record;
- ``spec_change``: a new spec version (``where`` added or narrowed, an ``expr`` column added or its
  expression changed; a tombstone switch, which needs a rebuild), then its re-derivation (a backfill
  of everything read, unbatched, or that rebuild): the oracle re-derives from every record read under
  the new spec, so rows the new spec no longer keeps are gone;
- ``plan_apply``: a plan of a run, maybe something in between, then its apply: the apply is refused as
  stale exactly when another run committed records to the target since the plan or the spec changed,
  else it writes what the plan counted;
- ``kill_retry``: a run whose task dies after its Spark stage and before its commit, then the retry
  (planned again under the same run id): nothing lost or doubled;
- ``corrupt_reconcile``: a row changed by SQL (UPDATE, DELETE, INSERT) or none, then the day's check:
  not ok exactly when the table differs from the oracle, and ok after the heal.

A ``where`` is a conjunction of conditions the oracle evaluates on the record's typed values; an
``expr`` column is derived from the first key column.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from tests.adversary.model import MORE_STEP_KINDS, Pipeline, Scenario, Step
from tests.adversary.strategies import scenarios
from tests.adversary.values import Column

EXPR_COLUMN = "d"
# name → (the Spark SQL of the first key column ``k``, what it gives for the key's logical value)
EXPRS: dict[str, tuple[str, Any]] = {
    "len": ("length(CAST(`{k}` AS STRING))", lambda v: len(_text(v))),
    "len_plus_one": ("length(CAST(`{k}` AS STRING)) + 1", lambda v: len(_text(v)) + 1),
}
# Spec changes a step may make; "tombstones" needs a rebuild, the others re-derive in place.
CHANGES = ("where", "expr", "tombstones")
# What a plan_apply may do between the plan and its apply.
BETWEEN = ("nothing", "catch_up", "tombstones")


# The first key's types whose text :func:`_text` writes as Spark's CAST(… AS STRING) prints it.
EXPR_KEY_TYPES = ("text", "bigint", "integer")


def _text(v: Any) -> str:
    """A key's logical value as Spark's CAST(… AS STRING) prints it (an integer's digits, a text as is)."""
    return str(v[1]) if isinstance(v, tuple) else str(v)


def _literal(v: Any) -> str:
    return str(v[1]) if isinstance(v, tuple) else "'" + str(v).replace("'", "''") + "'"


def where_sql(p: Pipeline) -> str | None:
    """The spec's ``where`` for the pipeline's conditions (None: no filter)."""
    parts = []
    for kind, arg in p.where:
        if kind == "not_null":
            parts.append(f"`{arg}` IS NOT NULL")
        elif kind == "key_not":
            parts.append(f"`{p.key[0].name}` <> {_literal(tuple(arg) if isinstance(arg, list) else arg)}")
        else:
            raise AssertionError(kind)
    return " AND ".join(f"({x})" for x in parts) or None


def derive(p: Pipeline, values: dict[str, Any]) -> dict[str, Any]:
    """The values of the ``expr`` columns this module derives (:data:`EXPRS`, an integer: tagged "int")."""
    key = values[p.key[0].name]
    known = {sql.format(k=p.key[0].name): fn for sql, fn in EXPRS.values()}
    return {name: ("int", known[sql](key)) for name, sql in p.exprs if sql in known}


def keeps(p: Pipeline, values: dict[str, Any]) -> bool:
    """Whether the ``where`` keeps the record (a NULL comparison does not keep it)."""
    for kind, arg in p.where:
        value = values[p.key[0].name] if kind == "key_not" else values[arg]
        if kind == "not_null" and value is None:
            return False
        if kind == "key_not" and (value is None or value == (tuple(arg) if isinstance(arg, list) else arg)):
            return False
    return True


def base_kind(step: Step) -> str:
    """The run kind whose ranges a step reads: a rebuild everything, a re-derivation what was read,
    a plan, an apply or a killed run those of the run it plans or retries."""
    if step.kind == "rebuild" or (step.kind == "spec_change" and step.change[0] == "tombstones"):
        return "backfill"  # no cut: [0, log end)
    if step.kind == "spec_change":
        return "replay_all"
    if step.kind in ("plan_apply", "kill_retry"):
        return str(step.change[0])
    return step.kind


def after_change(p: Pipeline, change: tuple[Any, ...]) -> Pipeline:
    """The pipeline under a spec change's new version."""
    kind = change[0]
    if kind == "where":
        return dataclasses.replace(p, where=(*p.where, (change[1], change[2])))
    if kind == "expr":
        expr = ((EXPR_COLUMN, EXPRS[change[1]][0].format(k=p.key[0].name)),)
        if EXPR_COLUMN not in dict(p.exprs):
            return dataclasses.replace(p, columns=(*p.columns, Column(EXPR_COLUMN, "integer", False)), exprs=expr)
        return dataclasses.replace(p, exprs=expr)
    if kind == "tombstones":
        return dataclasses.replace(p, tombstones=change[1])
    raise AssertionError(kind)


def _where_change(draw: st.DrawFn, p: Pipeline, key_values: list[Any]) -> tuple[Any, ...] | None:
    """A condition added to the ``where``: a value column not null, or the first key not one of its
    values. The key's values are compared as written only for a ``text`` key (another key type's
    spellings, and the malformed keys among the records, are no literal of its type)."""
    optional = [c.name for c in p.columns[len(p.key) :] if not c.required and c.name != EXPR_COLUMN]
    on_value: bool = draw(st.booleans())
    if optional and (on_value or p.key[0].type != "text"):
        return ("where", "not_null", draw(st.sampled_from(optional)))
    if p.key[0].type != "text":
        return None
    return ("where", "key_not", draw(st.sampled_from(key_values)))


def _tombstone_switch(p: Pipeline) -> tuple[Any, ...] | None:
    """The other tombstone rule, when the pipeline may take it (``delete`` only under offset ordering)."""
    if p.tombstones == "delete":
        return ("tombstones", "dead_letter")
    return ("tombstones", "delete") if p.ordering is None else None


@st.composite
def step_scenarios(draw: st.DrawFn, kinds: tuple[str, ...] = (), max_records: int = 30) -> Scenario:
    """A generated scenario (``strategies.scenarios``) whose pipeline may start with a ``where`` or an
    ``expr`` column, and whose middle steps are 1-3 steps beyond runs (of ``kinds``, default all)."""
    s = draw(scenarios(max_records=max_records, max_steps=1))
    p = s.pipeline
    key_values = sorted({_first_key(p, r.key) for r in s.records if r.key is not None} - {None}, key=repr)
    first = _where_change(draw, p, key_values or ["a"]) if draw(st.booleans()) else None
    if first is not None:
        p = after_change(p, first)
    exprs_ok = p.key[0].type in EXPR_KEY_TYPES
    if exprs_ok and draw(st.booleans()):
        p = after_change(p, ("expr", "len"))
    pool = kinds or MORE_STEP_KINDS
    middle: list[Step] = []
    current = p
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(pool))
        size = draw(st.none() | st.integers(1, 8))
        if kind == "rebuild":
            middle.append(Step("rebuild", batch_size=size))
        elif kind == "spec_change":
            narrowed = _where_change(draw, current, key_values or ["a"])
            options = [*([narrowed] if narrowed else [])]
            options += [("expr", draw(st.sampled_from(sorted(EXPRS))))] if exprs_ok else []
            switch = _tombstone_switch(current)
            options += [switch] if switch else []
            if not options:  # no change this pipeline's spec takes: a rebuild instead
                middle.append(Step("rebuild", batch_size=size))
                continue
            change = draw(st.sampled_from(options))
            middle.append(Step("spec_change", batch_size=size if change[0] == "tombstones" else None, change=change))
            current = after_change(current, change)
        elif kind == "plan_apply":
            run = draw(st.sampled_from(["replay_all", "replay_slice", "incremental", "backfill"]))
            between = draw(st.sampled_from([b for b in BETWEEN if b != "tombstones" or _tombstone_switch(current)]))
            fractions = st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=p.partitions, max_size=p.partitions)
            cut = tuple(draw(fractions))
            start = tuple(draw(fractions)) if run == "replay_slice" else ()
            middle.append(Step("plan_apply", cut, start, None, (run, between)))
            if between == "tombstones":
                switch = _tombstone_switch(current)
                assert switch is not None
                current = after_change(current, switch)
        elif kind == "kill_retry":
            run = draw(st.sampled_from(["backfill", "incremental", "catch_up"]))
            middle.append(Step(kind, batch_size=size, change=(run,)))
        else:  # the day's check needs the ledger at the log end: a catch-up first
            how = draw(st.sampled_from(["update", "delete", "insert", "nothing"]))
            middle += [Step("catch_up"), Step("corrupt_reconcile", change=(how,))]
    catch_up = [x for x in s.steps if x.kind == "catch_up"]
    return dataclasses.replace(s, pipeline=p, steps=(s.steps[0], *middle, *catch_up))


def _first_key(p: Pipeline, key: bytes) -> Any:
    """The first key column's logical value in a record's Kafka key (None: not one the generator wrote)."""
    import json

    try:
        text = key.decode("utf-8")
        raw = json.loads(text)[p.key[0].name] if len(p.key) > 1 else text
    except (ValueError, KeyError, TypeError):
        return None
    if p.key[0].type == "text":
        return str(raw)
    try:
        return ("int", int(raw))
    except ValueError:
        return None
