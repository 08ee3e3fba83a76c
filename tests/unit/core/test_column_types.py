"""The column types a spec declares: parsed with their modifiers, spelled as PostgreSQL's DDL and
``format_type`` spell them, and refused with the fix named (no services)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reprocess.core.column_types import ColumnType, format_type, parse_type
from reprocess.core.errors import SpecError
from reprocess.core.spec import DecimalHandling, PipelineSpec
from reprocess.formats.specs import parse_spec
from reprocess.postgres.evolve import diff_schema
from reprocess.postgres.target import create_target_sql


def _spec(columns: dict[str, Any], **settings: Any) -> PipelineSpec:
    return parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "bigint", **columns}, **settings})


NEW_TYPES = {
    "doc": ("jsonb", "jsonb"),
    "raw_doc": ("json", "json"),
    "ref": ("uuid", "uuid"),
    "born": ("date", "date"),
    "seen": ("timestamp", "timestamp without time zone"),
    "opens": ("time", "time without time zone"),
    "rank": ("smallint", "smallint"),
    "ratio": ("real", "real"),
    "blob": ("bytea", "bytea"),
    "price": ("numeric(20,6)", "numeric(20,6)"),
    "tags": ("text[]", "text[]"),
    "ids": ("bigint[]", "bigint[]"),
}


def test_every_new_type_parses_and_the_target_table_has_its_real_postgresql_type():
    spec = _spec({name: kind for name, (kind, _) in NEW_TYPES.items()})
    columns = {c.name: c for c in spec.columns}
    assert columns["doc"].type is ColumnType.JSONB
    assert columns["price"].type is ColumnType.NUMERIC and columns["price"].numeric == (20, 6)
    assert columns["tags"].type is ColumnType.TEXT_ARRAY and columns["tags"].type.array_element == "string"
    assert {n: c.sql_type for n, c in columns.items() if n != "id"} == {n: k for n, (k, _) in NEW_TYPES.items()}
    ddl = repr(create_target_sql(spec))
    assert all(f"Identifier('{n}'), SQL(' '), SQL('{k}')" in ddl for n, (k, _) in NEW_TYPES.items())
    # The live table as format_type reports it is the spec's: nothing to change.
    live = {"id": "bigint", **{n: f for n, (_, f) in NEW_TYPES.items()}}
    assert diff_schema(spec, live, ("id",)).changes == ()


def test_a_jsonb_column_that_is_text_in_the_live_table_is_a_type_change_not_applied_in_place():
    spec = _spec({"doc": "jsonb"})
    assert diff_schema(spec, {"id": "bigint", "doc": "text"}, ("id",)).changes == ("column doc: type text → jsonb",)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("numeric(20,6)", (ColumnType.NUMERIC, (20, 6))),
        ("numeric( 10 , 0 )", (ColumnType.NUMERIC, (10, 0))),
        ("numeric(12)", (ColumnType.NUMERIC, (12, 0))),
        ("numeric", (ColumnType.NUMERIC, None)),
        ("bigint[]", (ColumnType.BIGINT_ARRAY, None)),
    ],
)
def test_numeric_takes_precision_and_scale_as_postgresql_does(text, expected):
    assert parse_type(text) == expected


@pytest.mark.parametrize(
    "kind, problem",
    [
        ("numeric(3,5)", "numeric(3,5): the scale (5) must be at most the precision (3), as in PostgreSQL: e.g. "),
        ("numeric(0,0)", "numeric(0,0): the precision must be 1-1000 (PostgreSQL's limit), e.g. numeric(20,6)"),
        ("numeric(1001)", "numeric(1001): the precision must be 1-1000"),
        ("int[]", "'int[]' is not one of: text, bigint, integer, smallint"),
        ("varchar", "'varchar' is not one of:"),
    ],
)
def test_a_type_the_spec_cannot_hold_names_the_column_and_the_types_it_can(kind, problem):
    with pytest.raises(SpecError, match=re.escape(f"<spec>: field 'columns.x.type': {problem}")) as caught:
        _spec({"x": kind})
    if "is not one of" in problem:
        assert "jsonb" in str(caught.value) and "numeric(p,s)" in str(caught.value)


def test_format_type_spells_the_types_as_postgresql_reports_them():
    assert format_type(ColumnType.TIMESTAMP, None) == "timestamp without time zone"
    assert format_type(ColumnType.TIMESTAMPTZ, None) == "timestamp with time zone"
    assert format_type(ColumnType.NUMERIC, (20, 6)) == "numeric(20,6)"
    assert format_type(ColumnType.NUMERIC, None) == "numeric"


def test_a_precision_change_changes_the_fingerprint_and_old_specs_keep_theirs():
    plain, sized = _spec({"price": "numeric"}), _spec({"price": "numeric(20,6)"})
    assert plain.fingerprint != sized.fingerprint
    assert plain.as_dict()["columns"]["price"]["type"] == "numeric"
    assert sized.as_dict()["columns"]["price"]["type"] == "numeric(20,6)"


def test_decimal_handling_mode_is_a_debezium_setting_with_the_fix_in_its_errors():
    debezium = {"format": "debezium", "target_table": "public.p"}
    spec = _spec({"price": "numeric(20,6)"}, **debezium, decimal_handling_mode="precise")
    assert spec.decimal_handling is DecimalHandling.PRECISE
    assert _spec({}, **debezium).decimal_handling is DecimalHandling.STRING
    assert spec.fingerprint != _spec({"price": "numeric(20,6)"}, **debezium).fingerprint
    with pytest.raises(SpecError, match=r"'decimal_handling_mode': 'double' is not 'string' .* or 'precise': copy"):
        _spec({}, **debezium, decimal_handling_mode="double")
    with pytest.raises(SpecError, match=r"'decimal_handling_mode': only a debezium pipeline has one; format json"):
        _spec({}, decimal_handling_mode="precise")


def test_string_is_json_is_a_json_format_setting_of_json_columns_in_the_fingerprint():
    plain, held = _spec({"doc": "jsonb"}), _spec({"doc": {"type": "jsonb", "string_is_json": True}})
    assert (plain.columns[1].string_is_json, held.columns[1].string_is_json) == (False, True)
    assert plain.fingerprint == _spec({"doc": "jsonb"}).fingerprint != held.fingerprint
    assert held.as_dict()["columns"]["doc"]["string_is_json"] is True
    assert held.columns[1].with_required().string_is_json
    with pytest.raises(SpecError, match=r"columns.doc.string_is_json': only a json or jsonb column of the json"):
        _spec({"doc": {"type": "text", "string_is_json": True}})
    with pytest.raises(SpecError, match=r"columns.doc.string_is_json': only a json or jsonb column of the json"):
        _spec({"doc": {"type": "jsonb", "string_is_json": True}}, format="debezium", target_table="public.p")
