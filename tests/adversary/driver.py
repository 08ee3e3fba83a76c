"""Runs a scenario through the product's real path and checks every step against the oracle.

The one module of the adversary that imports the product: it writes the scenario's spec where the
DAGs find specs, produces its records to a topic of its own (each to its partition), runs each step
as the DAG does without Airflow's scheduler (``tests.support.helpers.plan_stage_commit``: the plan,
the Spark task over the warm Connect server, the commit) and reads back the target, the dead letters
and the ledger. After every step: the target equals the oracle value by value; the dead letters are
the malformed set; the ledger is what was read; a replay below the ledger changes no row at all.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, text

from reprocess.core.runs import RunKind, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_spec
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer
from tests.adversary import avro, steps
from tests.adversary.debezium import DebeziumOracle, interpret_key
from tests.adversary.model import MORE_STEP_KINDS, Pipeline, Scenario, Step
from tests.adversary.oracle import Oracle, Placed
from tests.adversary.values import from_pg_text, same
from tests.support.helpers import ledger, plan_stage_commit


class Mismatch(AssertionError):
    """The product left something other than the oracle's state after a step."""

    def __init__(self, step: int, kind: str, what: str, expected: Any, actual: Any) -> None:
        self.found = {"step": step, "step_kind": kind, "what": what, "expected": expected, "actual": actual}
        super().__init__(f"after step {step} ({kind}): {what}: expected {expected!r}, found {actual!r}")


@dataclass
class Outcome:
    name: str
    steps: int
    spark_runs: int
    seconds: float


def spec_for(p: Pipeline, name: str) -> PipelineSpec:
    """The scenario's pipeline as a YAML spec in the specs folder, read as the DAG file reads it."""
    derived = {**{c: {"path": v} for c, v in p.paths}, **{c: {"expr": v} for c, v in p.exprs}}
    raw = {
        "name": name,
        "topics": [name],
        "consumer_group": f"g-{name}",
        "key": [c.name for c in p.key],
        "columns": {c.name: {"type": c.sql_type, "required": c.required, **derived.get(c.name, {})} for c in p.columns},
        **({"where": steps.where_sql(p)} if p.where else {}),
        "ordering": {"mode": "column", "column": p.ordering} if p.ordering else "offset",
        **({"format": "debezium", "encoding": "json"} if p.format == "debezium" else {"tombstones": p.tombstones}),
        **({"format": "avro"} if p.format == "avro" else {}),
        "target_table": f"{name}.t",
        "max_dead_letter_ratio": 1,
        "schedule": None,
    }
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return read_spec(path)


def produce(kafka: dict[str, Any], topic: str, s: Scenario, registry: str | None = None) -> list[Placed]:
    """The records in order, each to its partition; their offsets from the broker's delivery reports.
    An avro scenario's versions are registered first (at ``registry``), its values framed with their ids."""
    ids = avro.register(registry or "", f"{topic}-value", s.registry) if s.pipeline.format == "avro" else {}
    demo_data.create_topic(kafka, topic, s.pipeline.partitions)
    producer = make_producer(kafka)
    offsets: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    aborting = None
    if any(r.aborted for r in s.records):  # an aborted record: its own transaction, aborted after delivery
        aborting = make_producer(kafka, **{"transactional.id": f"adv-{topic}"})
        aborting.init_transactions(30)
    for r in s.records:
        headers = [(k, v.encode()) for k, v in r.headers]
        value = avro.frame(r.value, ids) if ids else r.value
        p = aborting if r.aborted and aborting is not None else producer
        if p is aborting and aborting is not None:
            aborting.begin_transaction()
        p.produce(topic, partition=r.partition, key=r.key, value=value, headers=headers, on_delivery=delivered)
        assert p.flush(30) == 0  # one at a time: the delivery order is the production order
        if p is aborting and aborting is not None:
            aborting.abort_transaction(30)  # its marker takes the next offset: wait for it, so it stays there
            demo_data.wait_for_markers(kafka, topic, {r.partition: offsets[-1] + 2})
    return [Placed(r.partition, o, r) for r, o in zip(s.records, offsets, strict=True)]


def request_for(step: Step, oracle: Oracle, ranges: dict[int, tuple[int, int]]) -> RunRequest:
    """The trigger params of the step, as a person would fill the form."""
    ends = oracle.offsets_param({p: e for p, (_, e) in ranges.items()})
    size = {"batch_size": step.batch_size} if step.batch_size else {}
    if step.kind in ("incremental", "catch_up"):
        end = {"end_mode": "latest"} if step.kind == "catch_up" else {"end_mode": "offsets", "end_value": ends}
        return RunRequest.from_params({"start_mode": "ledger", **end, **size}, RunKind.INCREMENTAL)
    if step.kind == "backfill":
        return RunRequest.from_params({"start_mode": "earliest", "end_mode": "offsets", "end_value": ends, **size})
    starts = oracle.offsets_param({p: s for p, (s, _) in ranges.items()})
    return RunRequest.from_params(
        {"start_mode": "offsets", "start_value": starts, "end_mode": "offsets", "end_value": ends, **size}
    )


def target(engine: Engine, spec: PipelineSpec, p: Pipeline) -> dict[tuple[Any, ...], dict[str, Any]]:
    """key → the stored row, each column read from PostgreSQL's text of it (timestamptz in UTC)."""
    cols = [f'("{c.name}" AT TIME ZONE \'UTC\')::text' if c.type == "timestamptz" else f'"{c.name}"::text'
            for c in p.columns]  # fmt: skip
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT {', '.join(cols)} FROM {spec.qualified_target}")).all()
    out = {}
    for row in rows:
        values = {c.name: from_pg_text(c, v) for c, v in zip(p.columns, row, strict=True)}
        out[tuple(values[c.name] for c in p.key)] = values
    return out


def whole_table(engine: Engine, spec: PipelineSpec) -> list[str]:
    """Every row with every column (lineage, run id, timestamps) as text: what a replay must not change."""
    with engine.connect() as conn:
        return sorted(conn.execute(text(f"SELECT t::text FROM {spec.qualified_target} t")).scalars())


def dead_letters(engine: Engine, spec: PipelineSpec) -> set[tuple[int, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            # a dead letter a later run read and did not find dead (a rebuild under a new spec) is resolved
            text(
                'SELECT partition, "offset" FROM reprocess.dead_letters WHERE pipeline = :p AND resolved_run_id IS NULL'
            ),
            {"p": spec.name},
        ).all()
    return {(p, o) for p, o in rows}


def incomplete(engine: Engine, spec: PipelineSpec, p: Pipeline) -> set[tuple[tuple[Any, ...], str]]:
    """The (key, column) pairs ``reprocess.incomplete_values`` lists for the pipeline."""
    with engine.connect() as conn:
        rows = conn.execute(
            text('SELECT key, "column" FROM reprocess.incomplete_values WHERE pipeline = :p'), {"p": spec.name}
        ).all()
    return {(interpret_key(p, k), c) for k, c in rows}


def check(i: int, step: Step, engine: Engine, spec: PipelineSpec, oracle: Oracle, before: list[str] | None) -> None:
    """The state after step ``i`` against the oracle's; raises :class:`Mismatch`."""
    p = oracle.pipeline
    wanted, found = oracle.rows(), target(engine, spec, p)
    for key in sorted(set(wanted) | set(found), key=repr):
        w, f = wanted.get(key), found.get(key)
        if w is None or f is None or not all(same(w[c.name], f[c.name]) for c in p.columns):
            raise Mismatch(i, step.kind, f"row {key!r}", w, f)
    dead = dead_letters(engine, spec)
    if dead != oracle.dead_letters():
        raise Mismatch(i, step.kind, "dead letters (partition, offset)", sorted(oracle.dead_letters()), sorted(dead))
    held = {p: o for p, o in ledger(engine, spec).items() if o > 0}
    if held != {p: o for p, o in oracle.ledger.items() if o > 0}:
        raise Mismatch(i, step.kind, "ledger", oracle.ledger, held)
    if isinstance(oracle, DebeziumOracle):
        listed = incomplete(engine, spec, p)
        if listed != oracle.incomplete():
            raise Mismatch(i, step.kind, "incomplete values (key, column)", sorted(oracle.incomplete(), key=repr),
                           sorted(listed, key=repr))  # fmt: skip
    if before is not None and whole_table(engine, spec) != before:
        raise Mismatch(i, step.kind, "a replay below the ledger wrote", before, whole_table(engine, spec))


# A step beyond runs (tests/adversary/step_runs.run_step): runs step i, moves the oracle, returns the spec after it.
Beyond = Callable[[int, Step, Engine, dict[str, Any], PipelineSpec, Oracle, str], PipelineSpec]


def run(
    s: Scenario,
    engine: Engine,
    kafka: dict[str, Any],
    name: str | None = None,
    registry: str | None = None,
    beyond: Beyond | None = None,
) -> Outcome:
    """Produce the scenario, run its steps and check each; raises :class:`Mismatch` at the first difference.
    ``registry``: the Schema Registry's Confluent API URL (the ``schema_registry`` fixture), for avro.
    ``beyond``: what runs the steps beyond runs (a rebuild, a spec change, a plan and its apply…)."""
    started = time.monotonic()
    name = name or f"adv_{uuid.uuid4().hex[:12]}"
    spec = spec_for(s.pipeline, name)
    placed = produce(kafka, name, s, registry)
    oracle = (DebeziumOracle if s.pipeline.format == "debezium" else Oracle)(
        s.pipeline, placed, name, registry=s.registry
    )
    config = json.dumps({"url": registry}) if s.pipeline.format == "avro" else None
    spark_runs = 0
    for i, step in enumerate(s.steps):
        if step.kind in MORE_STEP_KINDS:
            assert beyond is not None, f"step {step.kind} needs tests.adversary.step_runs.run_step"
            spec = beyond(i, step, engine, kafka, spec, oracle, name)
            spark_runs += 1
            check(i, step, engine, spec, oracle, None)
            continue
        ranges = oracle.ranges(step)
        replay = step.kind in ("replay_all", "replay_slice")
        before = whole_table(engine, spec) if replay and oracle.ledger else None
        try:
            plan_stage_commit(engine, kafka, spec, request_for(step, oracle, ranges), f"{name}-{i}", config)
        except Exception as exc:  # a run that fails on generated input is a finding too
            raise Mismatch(i, step.kind, "the run", "committed", f"{type(exc).__name__}: {exc}") from exc
        spark_runs += any(s < e for s, e in ranges.values())
        oracle.apply(ranges)
        check(i, step, engine, spec, oracle, before)
    return Outcome(name, len(s.steps), spark_runs, time.monotonic() - started)


def describe(s: Scenario) -> dict[str, Any]:
    """What a scenario covers, for the fuzz report."""
    fmt = s.pipeline.format
    if fmt == "debezium":  # which connector wrote the events
        fmt += " (mysql)" if any(b'"connector":"mysql"' in (r.value or b"") for r in s.records) else " (postgresql)"
    return {
        "format": fmt,
        "types": sorted({c.sql_type if not c.numeric else "numeric(p,s)" for c in s.pipeline.columns}),
        "key": sorted({c.type for c in s.pipeline.key}),
        "ordering": (s.pipeline.ordering and s.pipeline.column(s.pipeline.ordering).type) or "offset",
        "aborted": any(r.aborted for r in s.records),
        "partitions": s.pipeline.partitions,
        "tombstones": s.pipeline.tombstones,
        "records": len(s.records),
        "steps": [st.kind for st in s.steps],
        "batched": any(st.batch_size for st in s.steps),
    }


def write_case(s: Scenario, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(s.to_json())
