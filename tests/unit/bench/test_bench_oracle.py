"""The bench's data and oracle: tombstones and late older versions are where the docs say, and
the oracle's expected state is each key's last record in its partition."""

from __future__ import annotations

from bench.data import DELETE_EVERY, DELETE_KEY, LATE_EVERY, LATE_KEY, STATUSES, Dataset, event
from bench.jdbc_sink import connect_json, connect_json_key
from bench.oracle import expected


def test_expected_state_deletes_tombstoned_keys_and_keeps_each_keys_last_record() -> None:
    records = 400  # 40 keys, 10 records each
    ds = Dataset("t", records, records // 10, {}, 0.0)
    state = expected(ds)
    assert len(state) == 40
    deleted = {k for k, v in state.items() if v is None}
    assert deleted == {f"o-{n:08d}" for n in range(40) if n % DELETE_EVERY == DELETE_KEY}
    late = f"o-{LATE_KEY:08d}"
    assert state[late] is not None and state[late][1] == STATUSES[-1]  # its late older version is not last


def test_late_older_version_goes_back_in_time_at_a_later_offset() -> None:
    orders = 40
    assert LATE_KEY % LATE_EVERY == LATE_KEY
    versions = [event(LATE_KEY + orders * u, orders)[2] for u in range(10)]
    stamps = [v["updated_at"] for v in versions if v is not None]
    assert stamps != sorted(stamps)  # one record carries an older version than the one before it
    assert stamps[-1] == max(stamps)  # the key's last record is its newest version


def test_connect_json_envelope_keeps_tombstones_null() -> None:
    assert b'"payload":{"order_id": "o-1"}' in connect_json_key("o-1")
    assert connect_json(0, "o-1", None) is None
    value = connect_json(0, "o-1", {"order_id": "o-1"})
    assert value is not None and value.startswith(b'{"schema":{"type": "struct"')
