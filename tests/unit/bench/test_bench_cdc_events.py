"""The CDC case's change events (bench.cdc_events): Debezium envelopes with their schema, the large
column left out in a third of the updates, and the model table's final state read back from the
events themselves."""

from __future__ import annotations

import json
from collections import Counter

from bench.cdc_events import BODY_CHARS, PLACEHOLDER, envelope, model_states
from bench.data import Dataset

RECORDS = 400  # 40 keys, 10 records each: 2 deleted, 2 with a late older version


def _events(records: int) -> list[tuple[str, dict]]:
    orders = records // 10
    out = []
    for i in range(records):
        doc = json.loads(envelope(i, "", None, orders=orders))
        out.append((f"o-{i % orders:08d}", doc))
    return out


def test_a_third_of_the_updates_leave_the_large_column_out_and_nothing_else_does() -> None:
    ops: Counter[str] = Counter()
    left_out: Counter[str] = Counter()
    previous: dict[str, bool] = {}
    for key, doc in _events(RECORDS):
        assert doc["schema"]["name"].endswith(".Envelope")  # how Debezium's JDBC sink knows an envelope
        payload = doc["payload"]
        ops[payload["op"]] += 1
        out = payload["after"] is not None and payload["after"]["body"] == PLACEHOLDER
        left_out[payload["op"]] += out
        assert not (out and previous.get(key)), "two updates in a row left the value out"
        previous[key] = out
        if payload["op"] == "d":
            assert payload["after"] is None and payload["before"]["order_id"] == key
            assert {v for k, v in payload["before"].items() if k != "order_id"} == {None}
        elif not out:
            assert len(payload["after"]["body"]) == BODY_CHARS
    assert ops == {"c": 40, "u": 358, "d": 2}
    assert left_out["c"] == left_out["d"] == 0
    # every key: 3 of its 9 updates, but key 3's third is its delete ((3 + 9) % 3 == 0): 119 of 358 updates
    assert left_out["u"] == 40 * 9 // 3 - 1


def test_the_model_table_holds_each_keys_last_sent_value_and_no_deleted_key() -> None:
    last: dict[str, tuple[str, ...] | None] = {}
    sent: dict[str, str] = {}
    for key, doc in _events(RECORDS):
        after = doc["payload"]["after"]
        if after is None:
            last[key] = None
            continue
        if after["body"] != PLACEHOLDER:
            sent[key] = after["body"]
        last[key] = (after["updated_at"], after["status"], after["amount"], sent[key])
    model = model_states(Dataset("t", RECORDS, RECORDS // 10, {}, 0.0))
    assert model == last
    assert sum(v is None for v in model.values()) == 2
    # the last change of a third of the keys left the value out: a sink writing the placeholder is wrong there
    finals = [doc["payload"]["after"] for _key, doc in _events(RECORDS)[-40:]]
    assert sum(a is not None and a["body"] == PLACEHOLDER for a in finals) in range(12, 15)
