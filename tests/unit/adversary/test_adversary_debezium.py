"""The adversary's Debezium model (issue 56): what its MySQL events and malformed records look like, and
what its model table makes of them; no service needed."""

from __future__ import annotations

import json

from tests.adversary.debezium import MALFORMED, DebeziumOracle, History
from tests.adversary.model import Pipeline, Step
from tests.adversary.oracle import Placed
from tests.adversary.values import Column

KEY, VALUE, POS = Column("k0", "bigint", True), Column("c0", "text", False), Column("pos", "bigint", False)


def _oracle(h: History) -> DebeziumOracle:
    placed = [Placed(r.partition, offset, r) for offset, r in enumerate(h.events)]
    oracle = DebeziumOracle(h.pipeline, placed, "t")
    oracle.apply(oracle.ranges(Step("catch_up")))
    return oracle


def test_a_mysql_binlog_rotation_restarts_pos_and_the_model_table_keeps_the_later_event() -> None:
    """Review IV #4's shape: after ``FLUSH LOGS`` the next change sits at a small ``pos`` of the next file,
    yet it is the newer one (Kafka order)."""
    p = Pipeline((KEY,), (KEY, VALUE, POS), None, "delete", 1, "debezium", paths=(("pos", "$source.pos"),))
    h = History(p, {(1,): 0}, connector="mysql")
    h.rows[(1,)] = {"c0": "before"}
    h.emit((1,), "c")
    h.lsn += 9_000_000  # a busy binlog: far into its file
    h.rows[(1,)] = {"c0": "old"}
    h.emit((1,), "u")
    h.rotate()
    h.rows[(1,)] = {"c0": "new"}
    h.emit((1,), "u")
    sources = [json.loads(r.value or b"")["source"] for r in h.events]
    assert [s["file"] for s in sources] == ["binlog.000001", "binlog.000001", "binlog.000002"]
    assert sources[2]["pos"] < sources[0]["pos"] < sources[1]["pos"]
    assert _oracle(h).rows() == {(("int", 1),): {"k0": ("int", 1), "c0": "new", "pos": ("int", 257)}}


def test_malformed_change_events_are_dead_letters_and_leave_the_row() -> None:
    p = Pipeline((KEY,), (KEY, VALUE), None, "delete", 1, "debezium")
    h = History(p, {(1,): 0})
    h.rows[(1,)] = {"c0": "kept"}
    h.emit((1,), "c")
    for how in MALFORMED:
        h.malformed((1,), how)
    oracle = _oracle(h)
    assert oracle.dead_letters() == {(0, offset) for offset in range(1, 1 + len(MALFORMED))}
    assert oracle.rows() == {(("int", 1),): {"k0": ("int", 1), "c0": "kept"}}
