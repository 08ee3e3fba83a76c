"""Dead-letter redrive through the real DAG: a spec fix turns a class of dead letters into rows.

Spec v1 requires ``currency``; some events lack it: for some orders every event, for some only
the newest, for some only the oldest. After the fix (v2: currency optional) the redrive confs
re-read exactly those offsets. The oracle (the produced messages, validated by the test's own
rules) says what the target must hold; the ordering keeps newer rows where the redriven record
is older; the fixed dead letters stay, marked resolved by the redrive run; a second redrive
finds only the messages that are still broken, and changes nothing.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from reprocess.kafka import demo_data
from reprocess.operations.redrive import plan_redrive
from tests.support import oracle
from tests.support.helpers import ORDERS_SPEC, oracle_rows, orders_spec, run_dag, target_rows

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]

KIND = "missing required field currency"


def _events_without_currency() -> tuple[list[tuple[str, dict[str, Any]]], set[int]]:
    """Order events with currency removed from every event (1 order in 4), the newest event (1 in 4)
    or the oldest event (1 in 4) of an order; returns the events and the indexes changed."""
    events = demo_data.order_events(40, 3, seed=31)
    by_key: dict[str, list[int]] = {}
    for i, (key, _) in enumerate(events):
        by_key.setdefault(key, []).append(i)
    dropped: set[int] = set()
    for n, key in enumerate(sorted(by_key)):
        indexes = by_key[key]
        dropped |= [set(indexes), {indexes[-1]}, {indexes[0]}, set()][n % 4]
    for i in dropped:
        del events[i][1]["currency"]
    return events, dropped


def _dead_letters(engine: Any, pipeline: str) -> dict[tuple[int, int], tuple[str, str, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                'SELECT partition, "offset", error_kind, run_id, resolved_run_id FROM reprocess.dead_letters '
                "WHERE pipeline = :p"
            ),
            {"p": pipeline},
        )
        return {(r.partition, r.offset): (r.error_kind, r.run_id, r.resolved_run_id) for r in rows}


def _run(engine: Any, spec: Any, conf: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """A backfill through ``dag.test()``; its run id and counts."""
    dr = run_dag(spec, "backfill", conf)
    assert dr.state == "success"
    run_id = f"{spec.dag_id('backfill')}/{dr.run_id}"
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT records_read, rows_upserted, dead_letters FROM reprocess.runs WHERE run_id = :r"),
            {"r": run_id},
        ).one()
    return run_id, dict(row._mapping)


def test_spec_fix_turns_a_class_of_dead_letters_into_rows_and_a_second_redrive_changes_nothing(
    kafka_config, engine, unique_name
):
    columns = yaml.safe_load(ORDERS_SPEC.read_text())["columns"]
    strict = {**columns, "currency": {**columns["currency"], "required": True}}
    spec_v1 = orders_spec(unique_name, unique_name, columns=strict, max_dead_letter_ratio=0.9)
    events, dropped = _events_without_currency()
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, events)
    # The oracle: which produced messages lack currency (and are otherwise valid orders).
    lacking = {
        (p, o)
        for p, o, _, value in produced.messages
        if (ev := oracle.is_valid_order(value)) is not None and "currency" not in ev
    }
    assert len(lacking) == len(dropped) > 0

    invalid = {(p, o) for p, o, _, value in produced.messages if oracle.is_valid_order(value) is None}

    first_run, _ = _run(engine, spec_v1)
    dead = _dead_letters(engine, spec_v1.name)
    currency_dead = {k for k, v in dead.items() if v[0] == KIND}
    # Every order lacking currency, plus broken messages that also lack it (checked in column order).
    assert lacking <= currency_dead and currency_dead - lacking <= invalid
    assert target_rows(engine, spec_v1) != oracle_rows(produced)  # orders whose newest event lacked currency

    # The fix, then the redrive of that kind: confs cover exactly the dead offsets (joined when close).
    spec_v2 = orders_spec(unique_name, unique_name, max_dead_letter_ratio=0.9)
    with engine.connect() as conn:
        plan = plan_redrive(conn, spec_v2.name, kind=KIND)
    assert plan.dead_letters == len(currency_dead)
    covered = {(r.partition, o) for r in plan.ranges for o in range(r.start, r.end)}
    assert lacking <= covered
    cli = subprocess.run(
        ["reprocess", "redrive", spec_v2.name, "--kind", KIND, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(cli.stdout)["confs"] == list(plan.confs)

    redrive_runs = [_run(engine, spec_v2, conf)[0] for conf in plan.confs]
    assert target_rows(engine, spec_v2) == oracle_rows(produced)
    after = _dead_letters(engine, spec_v2.name)
    assert set(after) == set(dead)  # kept for audit
    for key, (_, run_id, resolved) in after.items():
        if key in lacking:  # parsed now: kept, resolved by the redrive
            assert resolved in redrive_runs and run_id == first_run, key
        else:  # broken messages still fail: open, unchanged
            assert resolved is None and run_id == first_run, key

    # A second redrive only finds what still fails (alone, those would trip the dead-letter ratio
    # guard: nothing to gain); replaying the first conf changes nothing.
    with engine.connect() as conn:
        second = plan_redrive(conn, spec_v2.name, kind=KIND)
    assert second.dead_letters == len(currency_dead - lacking)
    rows_before = target_rows(engine, spec_v2)
    _, counts = _run(engine, spec_v2, plan.confs[0])
    assert counts["rows_upserted"] == 0
    assert target_rows(engine, spec_v2) == rows_before
    assert _dead_letters(engine, spec_v2.name) == after
