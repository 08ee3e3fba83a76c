"""The JSON Schema shipped for spec files agrees with the spec parser and accepts the shipped specs."""

from __future__ import annotations

from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

from reprocess.core.spec import SPEC_FIELDS, ColumnType, spec_schema

REPO = Path(__file__).resolve().parents[2]


def test_schema_declares_exactly_the_fields_and_column_types_the_parser_knows():
    schema = spec_schema()
    Draft202012Validator.check_schema(schema)
    assert set(schema["properties"]) == SPEC_FIELDS
    assert schema["$defs"]["column_type"]["anyOf"][0]["enum"] == [t.value for t in ColumnType]


def test_shipped_specs_are_valid_under_the_schema():
    validator = Draft202012Validator(spec_schema())
    for path in sorted((REPO / "pipelines").rglob("*.yaml")):  # the examples too
        assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == [], path
