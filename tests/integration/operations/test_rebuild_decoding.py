"""A rebuild's swap verifies the shadow against what the rebuild's own Spark job derived, so a
spec that filters records (``where``, a ``transform`` that drops rows) or derives its key or its
ordering column by ``expr`` swaps like any other, and a shadow that lost a key or holds an older
record is still refused.

Real broker, Postgres and Spark (the rebuild's batches run the real Spark job over Connect).
Every expectation is recomputed here from the records the test sent (the newest record per key
that the spec keeps), in plain Python; nothing of the product is imported for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.errors import ReprocessError
from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.runner.start import commit_stored, start_run
from tests.support.helpers import orders_spec, run_spark_stage
from tests.support.sent_topic import Topic

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

REBUILD = {"mode": "rebuild", "batch_size": 4}
COLUMNS = {"id": {"type": "text", "required": True}, "status": {"type": "text", "required": True}}


def _send_statuses(topic: Topic) -> None:
    """k1 active then draft (its newest kept record is the older one), k2 draft alone (never
    kept), k3 draft then paid, k4..k9 one or two kept updates: the keys spread over 3 batches."""
    for key, status in [("k1", "active"), ("k2", "draft"), ("k1", "draft"), ("k3", "draft"), ("k3", "paid")]:
        topic.send(key, {"id": key, "status": status})
    for i in range(4, 10):
        for u in range(1 + i % 2):
            topic.send(f"k{i}", {"id": f"k{i}", "status": f"s{u}"})


def _newest_kept(sent: list[tuple[Any, Any]], keep: Callable[[dict[str, Any]], bool]) -> dict[str, str]:
    """id → status of the newest record (by offset) per key among those ``keep`` keeps."""
    rows: dict[str, str] = {}
    for _key, value in sent:
        if keep(value):
            rows[value["id"]] = value["status"]
    return rows


def _rebuild(engine: Any, kafka: dict[str, Any], spec: PipelineSpec, run_id: str) -> None:
    plan, _ = start_run(engine, kafka, spec, RunRequest.from_params(REBUILD), run_id)
    run_spark_stage(spec, plan.run_id, batch_size=4, kafka=kafka)
    commit_stored(engine, spec, plan.run_id)


def _rows(engine: Any, spec: PipelineSpec, columns: str) -> dict[Any, Any]:
    """The target's rows: first column → the second (or the tuple of the rest)."""
    with engine.connect() as conn:
        result = conn.execute(text(f"SELECT {columns} FROM {spec.qualified_target}")).all()
    return {r[0]: r[1] if len(r) == 2 else tuple(r[1:]) for r in result}


def test_a_rebuild_with_a_where_filter_swaps_in_the_newest_kept_record_per_key(kafka_config, engine, unique_name):
    """``where`` drops drafts: k1's newest record is filtered (its row is the older active one) and
    k2 has no kept record at all. Neither is missing nor stale, so the swap must go through."""
    spec = orders_spec(unique_name, unique_name, key=["id"], columns=COLUMNS, where="status <> 'draft'")
    topic = Topic(kafka_config, unique_name)
    _send_statuses(topic)
    _rebuild(engine, kafka_config, spec, f"{unique_name}-rebuild")
    expected = _newest_kept(topic.sent, lambda v: v["status"] != "draft")
    assert expected["k1"] == "active" and "k2" not in expected
    assert _rows(engine, spec, "id, status") == expected


def test_a_rebuild_with_a_transform_that_drops_records_swaps_in_what_it_keeps(kafka_config, engine, unique_name):
    """The user's transform returns no draft rows: as with ``where``, the keys whose newest records
    it dropped keep their newest returned record, and a key it dropped entirely has no row."""
    spec = orders_spec(unique_name, unique_name, key=["id"], columns=COLUMNS,
                       transform="tests.support.transform_fns:drops_drafts", transform_version=1)  # fmt: skip
    topic = Topic(kafka_config, unique_name)
    _send_statuses(topic)
    _rebuild(engine, kafka_config, spec, f"{unique_name}-rebuild")
    assert _rows(engine, spec, "id, status") == _newest_kept(topic.sent, lambda v: v["status"] != "draft")


def test_a_rebuild_keyed_and_ordered_by_expr_columns_swaps_in_the_highest_version_per_key(
    kafka_config, engine, unique_name
):
    """The key is ``lower(email)`` (two spellings of one address are one key) and the ordering
    column ``rev * 10``; versions arrive out of order, so the newest version is not the last record."""
    columns = {"email": {"type": "text", "required": True}, "rev": {"type": "integer", "required": True},
               "email_key": {"type": "text", "required": True, "expr": "lower(email)"},
               "version": {"type": "bigint", "required": True, "expr": "rev * 10"},
               "note": {"type": "text"}}  # fmt: skip
    spec = orders_spec(unique_name, unique_name, key=["email_key"], columns=columns,
                       ordering={"mode": "column", "column": "version"})  # fmt: skip
    topic = Topic(kafka_config, unique_name)
    sends = [("A@x.io", 1), ("a@X.io", 3), ("B@x.io", 2), ("a@x.io", 2), ("b@x.io", 1), ("C@y.io", 5),
             ("D@y.io", 1), ("c@Y.io", 4), ("d@y.io", 7), ("E@z.io", 1)]  # fmt: skip
    for i, (email, rev) in enumerate(sends):
        topic.send(email.lower(), {"email": email, "rev": rev, "note": f"n{i}"})

    expected: dict[str, tuple[int, str]] = {}
    for _key, value in topic.sent:
        key, version = value["email"].lower(), value["rev"] * 10
        if key not in expected or version > expected[key][0]:
            expected[key] = (version, value["note"])
    _rebuild(engine, kafka_config, spec, f"{unique_name}-rebuild")
    assert _rows(engine, spec, "email_key, version, note") == expected


def test_a_shadow_missing_a_key_or_holding_an_older_record_is_refused(kafka_config, engine, unique_name):
    """The verification still finds real defects: after the rebuild's batches, one key's shadow row
    is deleted and another's replaced by its older record; the swap is refused naming both, the live
    table stays, and a fresh rebuild then swaps in the oracle's rows."""
    spec = orders_spec(unique_name, unique_name, key=["id"], columns=COLUMNS, where="status <> 'draft'")
    topic = Topic(kafka_config, unique_name)
    _send_statuses(topic)
    expected = _newest_kept(topic.sent, lambda v: v["status"] != "draft")
    _rebuild(engine, kafka_config, spec, f"{unique_name}-first")
    assert _rows(engine, spec, "id, status") == expected

    plan, _ = start_run(engine, kafka_config, spec, RunRequest.from_params(REBUILD), f"{unique_name}-broken")
    run_spark_stage(spec, plan.run_id, batch_size=4, kafka=kafka_config)
    shadow = f'{spec.target_schema}."{spec.target_table}__rebuild"'
    k3_draft = next(i for i, (k, v) in enumerate(topic.sent) if k == "k3" and v["status"] == "draft")
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM {shadow} WHERE id = 'k5'"))
        conn.execute(text(f"UPDATE {shadow} SET status = 'draft', _kafka_offset = :o WHERE id = 'k3'"), {"o": k3_draft})
    with pytest.raises(ReprocessError, match=r"rebuild .* is incomplete: .*1 missing, 1 stale \(e\.g\. k5, k3\)"):
        commit_stored(engine, spec, plan.run_id)
    assert _rows(engine, spec, "id, status") == expected

    _rebuild(engine, kafka_config, spec, f"{unique_name}-again")
    assert _rows(engine, spec, "id, status") == expected
