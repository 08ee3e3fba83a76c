"""Transforms in the spec on real Kafka, Spark (Connect) and Postgres: an ``expr`` column reading a
value field and the record's key, a ``where`` predicate, and the user's ``transform`` function.

A version bump of the transform re-derives exactly the rows whose values change (the ``eu``
rows get VAT), the others are restamped with the new spec version and keep ``_updated_at``;
reconciliation reports the rows of the older version until then and never misses a filtered key.
The oracle recomputes everything from the produced messages and imports nothing of the product.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from reprocess.core.errors import SpecError
from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import Migrate
from reprocess.formats.specs import read_spec
from reprocess.kafka import demo_data
from reprocess.operations.summary import format_summary, run_summary
from reprocess.runner.evaluate import RunContext, evaluate
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import backfill, orders_spec, reconcile_over_connect, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
BASE = datetime(2026, 11, 1, tzinfo=UTC)
SPEC = Path(__file__).resolve().parents[3] / "pipelines" / "examples" / "invoices.yaml"
REGIONS = ("eu", "us", "apac")


def _events(n: int) -> list[tuple[str, dict[str, Any]]]:
    """Invoices with 1-3 updates each: some test traffic (filtered), some negative amounts (the
    transform rejects them)."""
    out = []
    for i in range(n):
        key = f"inv-{i}"
        for u in range(1 + i % 3):
            status = "test" if (i + u) % 11 == 0 else ("paid" if u else "open")
            cents = -(i + 1) if (i * 7 + u) % 29 == 0 else 100 + i * 3 + u
            out.append((key, {"id": key, "region": REGIONS[i % 3], "status": status, "amount_cents": cents}))
    return out


def _oracle(produced: Any, vat: bool) -> tuple[dict[str, tuple[Any, ...]], int, int]:
    """key → (region, status, amount, label, net, partition, offset) of the newest kept record per
    key; the number of records ``where`` drops; the number of dead letters."""
    rows: dict[str, tuple[Any, ...]] = {}
    filtered = dead = 0
    for partition, offset, key, value in sorted(produced.messages):
        try:
            ev = json.loads(value)
        except ValueError:
            ev = None
        if not isinstance(ev, dict):  # not JSON, or not an object
            dead += 1
            continue
        if ev["status"] == "test":
            filtered += 1
            continue
        amount = Decimal(ev["amount_cents"]) / 100
        if amount < 0:
            dead += 1
            continue
        net = amount * Decimal("1.2") if vat and ev["region"] == "eu" else amount
        label = f"{ev['region']}:{key.decode()}"
        rows[ev["id"]] = (ev["region"], ev["status"], amount.normalize(), label, net.normalize(), partition, offset)
    return rows, filtered, dead


def _target(engine: Any, spec: PipelineSpec) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        result = conn.execute(
            text(f"SELECT id, region, status, amount, label, net, _kafka_partition, _kafka_offset, _updated_at, "
                 f"_spec_version FROM {spec.qualified_target}")
        )  # fmt: skip
        return {r[0]: (r[1], r[2], r[3].normalize(), r[4], r[5].normalize(), r[6], r[7], r[8], r[9]) for r in result}


def _spec(name: str, function: str, version: int) -> PipelineSpec:
    return orders_spec(name, name, base=SPEC, transform=f"tests.support.transform_fns:{function}",
                       transform_version=version)  # fmt: skip


def test_transform_version_bump_rederives_exactly_the_changed_rows(kafka_config, engine, unique_name):
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, _events(600), malformed=(b"{not json", b"[1, 2]"),
                                 base_time=BASE)  # fmt: skip
    v1 = _spec(unique_name, "v1", 1)
    expected, filtered, dead = _oracle(produced, vat=False)
    assert filtered and dead

    first = backfill(engine, kafka_config, v1, f"{unique_name}-1")
    loaded = _target(engine, v1)
    assert {k: v[:7] for k, v in loaded.items()} == expected
    assert (first.records_read, first.records_filtered, first.dead_letters) == (len(produced.messages), filtered, dead)
    summary = run_summary(engine, v1.name, first.run_id, spec=v1)
    assert summary["records_filtered"] == filtered
    assert f"({filtered} filtered out by where)" in format_summary(summary)
    with engine.connect() as conn:
        kinds = dict(conn.execute(text("SELECT error, count(*) FROM reprocess.dead_letters WHERE pipeline = :p "
                                       "GROUP BY 1"), {"p": v1.name}).all())  # fmt: skip
    assert kinds.pop("negative amount") == dead - 2 and sum(kinds.values()) == 2

    # A replay under the same version writes nothing.
    replay = backfill(engine, kafka_config, v1, f"{unique_name}-2")
    assert (replay.rows_upserted, replay.rows_restamped, replay.rows_rederived) == (0, 0, 0)
    assert _target(engine, v1) == loaded

    # v2 adds VAT for eu: planning registers the new version, a run migrates to it, and the rows v1 derived
    # are reported.
    v2 = _spec(unique_name, "v2", 2)
    assert v2.fingerprint != v1.fingerprint
    snapshot_and_migrate(engine, kafka_config, v2, RunRequest.from_params({"dry_run": True}), f"{unique_name}-dry")
    evaluate([Migrate(f"{unique_name}-dry")], RunContext(engine, v2))  # a run's Migrate stage makes v2 live
    stale = run_summary(engine, v2.name, f"{unique_name}-dry", spec=v2)["stale_message"]
    assert stale == f"{len(expected):,} rows from spec v1; current is v2: run a backfill to re-derive"

    bumped = backfill(engine, kafka_config, v2, f"{unique_name}-3")
    expected_v2, _, _ = _oracle(produced, vat=True)
    changed = {k for k in expected if expected[k] != expected_v2[k]}
    assert changed == {k for k, row in expected.items() if row[0] == "eu"}
    assert (bumped.rows_upserted, bumped.rows_inserted, bumped.rows_rederived) == (len(changed), 0, len(changed))
    assert bumped.rows_restamped == len(expected) - len(changed)
    after = _target(engine, v2)
    assert {k: v[:7] for k, v in after.items()} == expected_v2
    assert {k for k in after if after[k][7] != loaded[k][7]} == changed  # the others keep _updated_at
    assert {v[8] for v in after.values()} == {2}  # every row now says v2 derived it
    summary = run_summary(engine, v2.name, bumped.run_id, spec=v2)
    assert (summary["rows_rederived"], summary["rows_restamped"], summary["stale_message"]) == (
        len(changed), len(expected) - len(changed), "")  # fmt: skip
    print(format_summary(summary))

    # Reconciliation applies the same where: the keys it filters are never missing.
    started = time.monotonic()
    reconcile_over_connect(engine, v2, BASE, BASE + timedelta(days=1), f"{unique_name}-check")
    print(f"reconcile: {time.monotonic() - started:.1f} s")


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"transform": "tests.support.transform_fns:drops_lineage"},
         r"field 'transform': 'tests.support.transform_fns:drops_lineage' returned a DataFrame without "
         r"\['_kafka_topic'.*never drop them"),
        ({"transform": "tests.support.transform_fns:no_such_function"}, r"has no function 'no_such_function'"),
        ({"columns": {"id": "text", "status": "text", "region": "text", "net": "numeric", "label": "text",
                      "amount": {"type": "numeric", "expr": "no_such_fn(amount_cents)"}}},
         r"Spark cannot evaluate the spec's expressions \(columns.amount.expr: 'no_such_fn\(amount_cents\)';.*"
         r"UNRESOLVED_ROUTINE.*nothing was read"),
    ],
)  # fmt: skip
def test_what_only_spark_can_refuse_is_refused_before_anything_is_read(
    kafka_config, engine, unique_name, overrides, says
):
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, _events(5), malformed=(), base_time=BASE)
    spec = orders_spec(unique_name, unique_name, base=SPEC, **overrides)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), f"{unique_name}-1")
    with pytest.raises(SpecError, match=says):
        run_spark_stage(spec, plan.run_id)
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT count(*) FROM {spec.qualified_target}")).scalar_one() == 0


def test_spark_submit_reaches_the_transform_through_py_files(kafka_config, engine, unique_name, tmp_path):
    """The driver spark-submit starts imports the function from the zip ``spark.submit.pyFiles``
    (``--py-files``) ships, as on a cluster; the rows equal the oracle's."""
    import zipfile

    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, _events(60), malformed=(b"{not json",),
                                 base_time=BASE)  # fmt: skip
    shipped = tmp_path / "my_transforms.zip"
    with zipfile.ZipFile(shipped, "w") as z:
        z.writestr("shipped_fns/__init__.py", "")
        z.write(Path(__file__).parents[2] / "support" / "transform_fns.py", "shipped_fns/fns.py")
    spec = orders_spec(unique_name, unique_name, base=SPEC, transform="shipped_fns.fns:v2", transform_version=2)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), f"{unique_name}-1")
    started = time.monotonic()
    run_spark_stage(spec, plan.run_id, launcher="submit", conf={"spark.submit.pyFiles": str(shipped)})
    result = commit_stored(engine, spec, plan.run_id)
    print(f"spark-submit: {result} in {time.monotonic() - started:.1f} s")
    expected, filtered, dead = _oracle(produced, vat=True)
    assert {k: v[:7] for k, v in _target(engine, spec).items()} == expected
    assert (result.records_filtered, result.dead_letters) == (filtered, dead)


def test_the_example_spec_loads() -> None:
    spec = read_spec(SPEC)
    assert spec.value_fields == ("amount_cents",) and spec.transform is not None
    assert yaml.safe_load(SPEC.read_text())["where"] == spec.where


def _versioned_events(n: int) -> list[tuple[str, dict[str, Any]]]:
    """Invoices with 1-3 updates each, carrying a ``version``; half the keys send theirs in reverse
    (the newest version first in the log), so keeping the last offset would keep the wrong row."""
    out = []
    for key, ev in _events(n):
        out.append((key, {**ev, "version": 0}))
    by_key: dict[str, list[int]] = {}
    for i, (key, _) in enumerate(out):
        by_key.setdefault(key, []).append(i)
    for n_key, (key, places) in enumerate(by_key.items()):
        versions = list(range(1, len(places) + 1))
        for place, version in zip(places, versions[::-1] if n_key % 2 else versions, strict=True):
            out[place] = (key, {**out[place][1], "version": version})
    return out


def _newest_by_version(produced: Any, vat: bool) -> dict[str, tuple[Any, ...]]:
    """key → (region, status, amount, label, net, version, partition, offset) of the highest
    version among each key's kept good records (``where`` drops test traffic, v1 rejects negative
    amounts), computed from the produced messages alone."""
    best: dict[str, tuple[Any, ...]] = {}
    for partition, offset, key, value in sorted(produced.messages):
        ev = json.loads(value)
        amount = Decimal(ev["amount_cents"]) / 100
        if ev["status"] == "test" or amount < 0:
            continue
        net = amount * Decimal("1.2") if vat and ev["region"] == "eu" else amount
        label = f"{ev['region']}:{key.decode()}"
        row = (ev["region"], ev["status"], amount.normalize(), label, net.normalize(), ev["version"], partition, offset)
        if ev["id"] not in best or best[ev["id"]][5] < ev["version"]:
            best[ev["id"]] = row
    return best


def test_a_declared_transform_on_a_column_ordered_pipeline_rederives_its_columns_without_a_rebuild(
    kafka_config, engine, unique_name
):
    """Issue 59 item 7: a transform bump on a pipeline ordered by a column was refused (it might
    rewrite the ordering column). Declaring ``transform_derives: [net]`` lets the bump re-derive
    exactly the rows whose ``net`` changes, with no rebuild, each key keeping its highest version;
    a returned row whose ordering column the function changed anyway is a dead letter."""
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, _versioned_events(300), malformed=(), base_time=BASE)
    raw = yaml.safe_load(SPEC.read_text())

    def spec(function: str, version: int) -> PipelineSpec:
        return orders_spec(unique_name, unique_name, base=SPEC, transform=f"tests.support.transform_fns:{function}",
                           transform_version=version, transform_derives=["net"],
                           ordering={"mode": "column", "column": "version"},
                           columns={**raw["columns"], "version": {"type": "bigint", "required": True}})  # fmt: skip

    def target() -> dict[str, tuple[Any, ...]]:
        with engine.connect() as conn:
            result = conn.execute(text(f"SELECT id, region, status, amount, label, net, version, _kafka_partition, "
                                       f"_kafka_offset, _updated_at FROM {v1.qualified_target}"))  # fmt: skip
            return {r[0]: (*r[1:3], r[3].normalize(), r[4], r[5].normalize(), *r[6:]) for r in result}

    v1 = spec("v1", 1)  # each spec is written to the pipeline's file when made: a run checks it is the one planned
    expected = _newest_by_version(produced, vat=False)
    last_offset_wins = {k for k, row in expected.items() if any(
        p == row[6] and o > row[7] and json.loads(v)["id"] == k for p, o, _, v in produced.messages)}  # fmt: skip
    assert last_offset_wins  # the ordering is exercised: some keys' newest version is not their last record
    backfill(engine, kafka_config, v1, f"{unique_name}-1")
    loaded = target()
    assert {k: v[:8] for k, v in loaded.items()} == expected

    # v2 adds VAT for eu and, against its declaration, raises inv-1's version: those records become
    # dead letters (never re-ordered), and inv-1's row, which no record of v2 keeps, is deleted.
    bumped = backfill(engine, kafka_config, spec("v2_moving_one_version", 2), f"{unique_name}-2")

    expected_v2 = _newest_by_version(produced, vat=True)
    changed = {k for k in expected if expected[k] != expected_v2[k]}
    assert changed == {k for k, row in expected.items() if row[0] == "eu"} and "inv-1" not in changed
    counts = (bumped.rows_upserted, bumped.rows_inserted, bumped.rows_rederived, bumped.rows_deleted)
    assert counts == (len(changed), 0, len(changed), 1)
    after = target()
    del expected_v2["inv-1"]
    assert {k: v[:8] for k, v in after.items()} == expected_v2  # the highest version still, net re-derived
    assert {k for k in after if after[k][8] != loaded[k][8]} == changed  # only those rows were written
    with engine.connect() as conn:
        dead = conn.execute(text("SELECT error, count(*) FROM reprocess.dead_letters WHERE pipeline = :p AND "
                                 "run_id = :r GROUP BY 1"), {"p": v1.name, "r": f"{unique_name}-2"}).all()  # fmt: skip
    inv_1 = sum(1 for *_, v in produced.messages if (ev := json.loads(v))["id"] == "inv-1" and ev["status"] != "test")
    assert dead == [("transform: changed column version, which transform_derives does not list", inv_1)]
