"""The left-out case's source table (bench.left_out.Table): its events replayed by hand give back the
table it says it holds, so the oracle the case checks both targets against is the events' own."""

from __future__ import annotations

from bench.left_out import PLACEHOLDER, REKEY_EVERY, Table


def test_a_rounds_events_replayed_give_the_table_the_oracle_holds() -> None:
    table, rows = Table(), {}
    events = [*table.snapshot(50), *table.round(1, 300), *table.round(2, 300)]
    for key, value, headers in events:
        if value is None:  # the tombstone after a delete
            continue
        if value["op"] == "d":
            moved_to = dict(headers)["__debezium.newkey"]
            assert moved_to and key in rows
            kept = rows.pop(key)
            continue
        after = value["after"]
        old = rows.get(key, kept if "__debezium.oldkey" in dict(headers) else None)
        note = old[1] if after["note"] == PLACEHOLDER else after["note"]
        rows[after["id"]] = (after["status"], note)
    assert rows == table.rows
    assert len(events) == 50 + 300 + 300
    changes = sum(1 for _k, v, _h in events if v is not None and v["op"] == "d")
    assert changes == 2 * 2  # the 100th and 200th event drawn of each round (a change takes three)
    assert REKEY_EVERY == 100
    left_out = sum(1 for _k, v, _h in events if v is not None and v["op"] != "d" and v["after"]["note"] == PLACEHOLDER)
    assert left_out == 600 - 2 * changes  # every update and every key change's create
