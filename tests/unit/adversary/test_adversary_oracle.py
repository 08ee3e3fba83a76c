"""The adversary's oracle stands apart from the product, and its written-out rules say what the README
says (issue 56): no service needed."""

from __future__ import annotations

import ast
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings

from tests.adversary.model import Pipeline, Record, Scenario, Step
from tests.adversary.oracle import Oracle, Placed
from tests.adversary.strategies import scenarios
from tests.adversary.values import Column, Invalid, from_json, from_pg_text, parse_object, same, sort_key

ADVERSARY = Path(__file__).resolve().parents[2] / "adversary"
INDEPENDENT = (
    "__init__.py", "values.py", "pg_text.py", "model.py", "oracle.py", "strategies.py", "debezium.py", "avro.py",
    "avro_oracle.py", "steps.py",
)  # fmt: skip


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", INDEPENDENT)
def test_the_model_and_oracle_import_nothing_of_the_product(module: str) -> None:
    imported = _imports(ADVERSARY / module)
    assert not {m for m in imported if m == "reprocess" or m.startswith(("reprocess.", "tests.support"))}
    # ...and, inside the adversary, only each other (the driver is the one that runs the product)
    inner = {m.rsplit(".", 1)[-1] for m in imported if m.startswith("tests.adversary")}
    assert inner <= {m.removesuffix(".py") for m in INDEPENDENT}


def _value(kind: str, fragment: str, numeric: tuple[int, int] | None = None) -> object:
    return from_json(Column("c", kind, False, numeric), parse_object(f'{{"c":{fragment}}}'.encode())["c"])


@pytest.mark.parametrize(
    ("kind", "fragment", "numeric", "expected"),
    [
        ("text", "-12", None, "-12"),
        ("text", "true", None, "true"),
        ("bigint", '" 12 "', None, ("int", 12)),
        ("numeric", '"1.50e2"', None, ("num", Decimal(150))),
        ("numeric(p,s)", "1.005", (10, 2), ("num", Decimal("1.01"))),
        ("numeric(p,s)", "-0.005", (3, 2), ("num", Decimal("-0.01"))),
        ("boolean", "0", None, ("bool", False)),
        ("time", '"24:00"', None, ("time", 86_400_000_000)),
        ("bytea", '"AAE"', None, ("bytes", b"\x00\x01")),  # the padding may be left out
        # whitespace skipped (make fuzz found the oracle refusing it)
        ("bytea", '"AA E="', None, ("bytes", b"\x00\x01")),
        ("text[]", '["a",null,1,true]', None, ("array", ("a", None, "1", "true"))),
        ("bigint[]", '[" 8 ",null]', None, ("array", (8, None))),
        ("json", '{"a":"x\\u0000"}', None, ("json", ("o", (("a", ("s", "x\x00")),)))),  # json keeps the escape
        ("boolean", '" TRUE "', None, ("bool", True)),
    ],
)
def test_json_values_become_what_the_readme_table_says(kind, fragment, numeric, expected) -> None:
    assert _value(kind, fragment, numeric) == expected


@pytest.mark.parametrize(
    ("kind", "fragment", "numeric"),
    [
        ("text", '"a\\u0000"', None),
        ("text", "12.50", None),
        ("bigint", "9223372036854775808", None),
        ("numeric", "1234567890123456789012345678901234567890.5", None),
        ("numeric(p,s)", "9.995", (3, 2)),
        ("double precision", '"1e-400"', None),
        ("real", "1e39", None),  # Python packs it as an infinite float4; make fuzz found the oracle taking it
        ("timestamptz", '"0001-01-01T00:00:00+01:00"', None),
        ("time", '"24:00:01"', None),
        ("jsonb", '{"a":"\\u0000"}', None),
        ("numeric", "15e-1", None),  # a JSON number with an exponent: make fuzz found the oracle taking it
        ("text[]", "[12.50]", None),  # Spark would store 12.5
        ("text[]", '"[]"', None),  # a string is no array
        ("text[]", '["a\\u0000"]', None),
        ("bigint[]", "[1.5]", None),
        ("bytea", '"A"', None),
        ("boolean", '"on"', None),  # PostgreSQL takes on/off; the product's readers do not (docs/formats/json.md)
        ("boolean", "2", None),
        ("boolean", "1.0", None),
    ],
)
def test_values_the_column_cannot_hold_are_dead_letters(kind, fragment, numeric) -> None:
    with pytest.raises(Invalid):
        _value(kind, fragment, numeric)


@pytest.mark.parametrize(
    ("kind", "printed", "fragment"),
    [("boolean", "true", "1"), ("boolean", "false", '"no"'), ("time", "24:00:00", '"24:00"'),
     ("timestamp", "0999-01-01 00:00:00", '"0999-01-01"'), ("double precision", "NaN", '"NaN"'),
     ("double precision", "-Infinity", '"-Infinity"'), ("numeric", "150", '"1.50e2"')],
)  # fmt: skip
def test_what_postgresql_prints_reads_back_as_the_value_the_oracle_expects(kind, printed, fragment) -> None:
    """``column::text`` as PostgreSQL prints it (a boolean is 'true', not the bare column's 't': the
    first make fuzz run reported every true as false until this was so)."""
    assert same(from_pg_text(Column("c", kind), printed), _value(kind, fragment))


def test_numeric_orders_by_value_time_by_microseconds_and_text_by_bytes() -> None:
    assert sort_key(_value("numeric", "10")) > sort_key(_value("numeric", "9"))
    assert sort_key(_value("time", '"10:00"')) == sort_key(_value("time", '"10:00:00.000000"'))
    assert sort_key(_value("text", '"a"')) > sort_key(_value("text", '"B"'))
    assert sort_key(_value("double precision", '"NaN"')) > sort_key(_value("double precision", "1e308"))


def test_the_newest_version_wins_and_ties_go_to_the_later_partition_then_offset() -> None:
    key, v = Column("k0", "text", True), Column("v", "numeric", True)
    p = Pipeline((key,), (key, v), "v", "dead_letter", 2)
    records = [(0, 0, '{"k0":"a","v":10}'), (1, 0, '{"k0":"a","v":9}'), (0, 1, '{"k0":"b","v":1}'),
               (1, 1, '{"k0":"b","v":1.0}'), (0, 2, "not json")]  # fmt: skip
    oracle = Oracle(p, [Placed(q, o, Record(q, b"k", r.encode())) for q, o, r in records], "t")
    oracle.apply(oracle.ranges(Step("catch_up")))
    assert {k: vs["v"] for k, vs in oracle.rows().items()} == {
        ("a",): ("num", Decimal(10)),
        ("b",): ("num", Decimal("1.0")),
    }
    assert oracle.dead_letters() == {(0, 2)}
    assert oracle.ledger == {0: 3, 1: 2}


def test_the_ledger_never_rewinds_and_a_replay_reads_nothing_new() -> None:
    key = Column("k0", "bigint", True)
    p = Pipeline((key,), (key,), None, "delete", 1)
    placed = [Placed(0, o, Record(0, b"1", b'{"k0":1}' if o < 3 else None)) for o in range(4)]
    oracle = Oracle(p, placed, "t")
    oracle.apply(oracle.ranges(Step("backfill", (0.75,))))
    assert oracle.ledger == {0: 3} and list(oracle.rows()) == [(("int", 1),)]
    oracle.apply(oracle.ranges(Step("replay_slice", (0.5,), (0.25,))))
    assert oracle.ledger == {0: 3}
    oracle.apply(oracle.ranges(Step("catch_up")))
    assert oracle.ledger == {0: 4} and oracle.rows() == {}  # the tombstone deleted key 1


@settings(max_examples=30, deadline=None, database=None)
@given(scenarios())
def test_generated_scenarios_survive_their_case_file(s: Scenario) -> None:
    assert Scenario.from_json(s.to_json()) == s
    oracle = Oracle(s.pipeline, [Placed(r.partition, i, r) for i, r in enumerate(s.records)], "t")
    for step in s.steps:
        oracle.apply(oracle.ranges(step))
        oracle.rows()


def test_postgres_array_output_reads_back_quoted_null_and_empty_elements() -> None:
    from tests.adversary.pg_text import array_of_pg_text

    assert array_of_pg_text(r'{a,"b c",NULL,"NULL","","\"q\\"}') == ("a", "b c", None, "NULL", "", '"q\\')
    assert array_of_pg_text("{}") == ()
