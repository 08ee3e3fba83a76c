"""docs/spec.md is the schema's reference: generated from it, complete, and its examples are valid specs."""

from __future__ import annotations

import re

import yaml
from jsonschema import Draft202012Validator

from reprocess.core.spec_schema import spec_schema
from reprocess.formats.specs import parse_spec
from scripts import spec_reference


def test_the_spec_reference_is_what_the_schema_generates():
    written = spec_reference.OUTPUT.read_text()
    assert written == spec_reference.render(), (
        f"docs/spec.md differs from reprocess/core/spec.schema.json: run `{spec_reference.COMMAND}` and commit it"
    )


def test_every_field_has_a_description_and_an_example_the_schema_accepts():
    schema = spec_schema()
    seen = []
    for key, prop, _ in spec_reference.fields(schema):
        assert prop.get("description"), f"{key}: no description in the schema"
        assert prop.get("examples"), f"{key}: no example in the schema"
        validator = Draft202012Validator({"$defs": schema["$defs"], **prop})
        assert list(validator.iter_errors(prop["examples"][0])) == [], key
        seen.append(key)
    assert set(schema["properties"]) <= set(seen)
    assert {"reconcile.cron", "ordering.column", "columns.<name>.path"} <= set(seen)
    column_type = schema["$defs"]["column_type"]
    assert list(Draft202012Validator(column_type).iter_errors(column_type["examples"][0])) == []


def test_the_reference_holds_one_complete_valid_spec_per_format():
    reference = spec_reference.OUTPUT.read_text()
    complete = reference.split("## One complete spec per format", 1)[1]
    blocks = re.findall(r"```yaml\n(.*?)```", complete, flags=re.S)
    validator = Draft202012Validator(spec_schema())
    formats = []
    for block in blocks:
        raw = yaml.safe_load(block)
        assert list(validator.iter_errors(raw)) == [], block
        formats.append(parse_spec(raw).format.value)
    assert formats == ["json", "avro", "debezium"]
