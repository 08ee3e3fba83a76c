"""A key's newest record that PostgreSQL's COPY would refuse never hides the key's older good
record, for any column type (issue 53, review V finding 3; issue 39 item 7 did it for text).

Each column has a value PostgreSQL refuses although it is well-formed JSON for the decoder: jsonb
holding ``\\u0000``; json text (a JSON string the spec reads as JSON) with text after its value;
jsonb text holding a lone surrogate escape (json takes it, jsonb does not); a NUL inside a
``text[]`` element; ``numeric(40,2)`` with 39 digits before the point (past Spark's 38), a
``numeric(45,5)`` whose rounding carries past its 40. Run 1
stores a good record per key; run 2 sends a good record and then the refused one per key (in the
record, or made by the spec's transform from a good one). The
run-2 good value must be stored, the refused one be a dead letter naming its column, and the day's
reconciliation must compare these keys: a key left holding its run-1 record is a gap. The
expectations are the values the test sends; the oracle reads PostgreSQL with SQL alone.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.errors import ReconciliationGap
from reprocess.core.runs import RunRequest
from reprocess.kafka.clients import make_producer
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import orders_spec, reconcile_over_connect, run_spark_stage
from tests.support.hostile_corpus import Case
from tests.support.hostile_run import produce_corpus, snapshot

pytestmark = [pytest.mark.integration("postgres"), pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

COLUMNS: dict[str, Any] = {
    "id": {"type": "text", "required": True},
    "doc": "jsonb",
    "raw": {"type": "json", "string_is_json": True},
    "js": {"type": "jsonb", "string_is_json": True},
    "tags": "text[]",
    "amount": "numeric(40,2)",
    "big": "numeric(45,5)",
    "t": "text",
}
# Per column: (run 1's good value, run 2's good value, run 2's newest value that PostgreSQL refuses,
# what PostgreSQL reads back for the run-2 good value). Values are as the record's JSON sends them.
CASES: dict[str, tuple[Any, Any, Any, Any]] = {
    "doc": ({"a": 0}, {"a": 1}, {"a": "x\u0000"}, {"a": 1}),
    "raw": ('{"a": 0}', "[1, 2]", '{"a": 1} x', [1, 2]),
    "js": ('{"b": 0}', '"ok"', '"\\ud800"', "ok"),
    "tags": (["a"], ["b", None], ["c\u0000"], ["b", None]),
    "amount": ("1.50", "9" * 38 + ".99", "1" * 39, Decimal("9" * 38 + ".99")),
    # 40 nines and .999995 round to 10^40 at 5 places, past the 40 digits before the point.
    "big": ("0", "9" * 40 + ".99999", "9" * 40 + ".999995", Decimal("9" * 40 + ".99999")),
}


def _record(column: str, value: Any, key: str = "K", t: str = "good") -> bytes:
    return json.dumps({"id": f"{key}-{column}", column: value, "t": t}).encode()


def _run(engine: Any, kafka_config: dict[str, Any], spec: Any, run_id: str) -> Any:
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), run_id)
    run_spark_stage(spec, plan.run_id)
    return commit_stored(engine, spec, plan.run_id)


def test_a_refused_newest_record_of_any_type_lets_the_keys_older_good_record_land(kafka_config, engine, unique_name):
    """Keys K-<column> send the refused value in the record; keys T-<column> send a good one that the
    spec's transform turns into the refused value (the transform's own check)."""
    spec = orders_spec(
        unique_name, unique_name, key=["id"], columns=COLUMNS, max_dead_letter_ratio=0.9,
        transform="tests.support.transform_fns:refused_values", transform_version="1",
    )  # fmt: skip
    run_1 = [Case(f"{k}-{c}", "run 1", _record(c, v[0], k)) for k in ("K", "T") for c, v in CASES.items()]
    first = produce_corpus(kafka_config, unique_name, run_1)
    _run(engine, kafka_config, spec, f"{unique_name}-1")
    start = datetime.now(UTC) - timedelta(seconds=1)
    producer = make_producer(kafka_config)
    run_2 = []
    for column, (_, good, refused, _) in CASES.items():
        run_2 += [_record(column, good), _record(column, refused)]
        run_2 += [_record(column, good, "T"), _record(column, good, "T", f"bad-{column}")]
    for value in run_2:
        producer.produce(unique_name, key=json.loads(value)["id"].encode(), value=value)
    assert producer.flush(30) == 0
    time.sleep(1.5)
    end = datetime.now(UTC)
    result = _run(engine, kafka_config, spec, f"{unique_name}-2")

    rows, dead = snapshot(engine, spec)
    good_offsets = {f"{k}-{c}": len(run_1) + 4 * i + 2 * j for i, c in enumerate(CASES) for j, k in enumerate("KT")}
    stored = {r["id"]: (r[r["id"][2:]], r["_kafka_offset"]) for r in rows}
    assert stored == {key: (CASES[key[2:]][3], offset) for key, offset in good_offsets.items()}
    assert (result.records_read, result.dead_letters) == (len(run_1) + len(run_2), len(run_2) // 2)
    errors = {d["offset"]: d["error"] for d in dead}
    assert sorted(errors) == sorted(o + 1 for o in good_offsets.values())
    for key, offset in good_offsets.items():  # Spark's checks name the column, not the COPY's refusal
        error = errors[offset + 1]
        assert re.match(rf"(type error|transform): (column|field) {key[2:]} ", error), (key, error)

    # The day's check compares these keys: ok now, a gap once a key holds its run-1 record again.
    assert all(v.ok for v in reconcile_over_connect(engine, spec, start, end, f"{unique_name}-c1"))
    with engine.begin() as conn:
        for key in good_offsets:
            column = key[2:]
            conn.execute(
                text(f"UPDATE {spec.qualified_target} SET {column} = CAST(:v AS {_type(column)}), "
                     "_kafka_offset = :o WHERE id = :k"),
                {"v": _sql_value(CASES[column][0]), "o": first[key], "k": key},
            )  # fmt: skip
    with pytest.raises(ReconciliationGap):
        reconcile_over_connect(engine, spec, start, end, f"{unique_name}-c2")


def _type(column: str) -> str:
    declared = COLUMNS[column]
    return declared if isinstance(declared, str) else declared["type"]


def _sql_value(value: Any) -> str:
    """A run-1 value as the text PostgreSQL's input reads for its column."""
    if isinstance(value, list):
        return "{" + ",".join(f'"{v}"' for v in value) + "}"
    return value if isinstance(value, str) else json.dumps(value)
