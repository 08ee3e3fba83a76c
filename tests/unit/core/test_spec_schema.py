"""The JSON Schema shipped for spec files agrees with the spec model and accepts the shipped specs.

The model (:class:`PipelineSpec`'s fields) declares the keys, their defaults and their enums once;
the schema is kept by hand for editors, so these tests hold it to the model.
"""

from __future__ import annotations

import enum
from dataclasses import fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml
from jsonschema import Draft202012Validator

from reprocess.core.ordering import OrderingMode
from reprocess.core.spec import SPEC_DEFAULTS, SPEC_FIELDS, ColumnType, PipelineSpec, file_keys
from reprocess.core.spec_schema import spec_schema

REPO = Path(__file__).resolve().parents[3]


def _keys(properties: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every key the schema declares, a key inside another dotted (``reconcile.cron``)."""
    found = {}
    for key, prop in properties.items():
        found[prefix + key] = prop
        found.update(_keys(prop.get("properties", {}), f"{prefix}{key}."))
    return found


def test_schema_declares_exactly_the_fields_and_column_types_the_model_knows():
    schema = spec_schema()
    Draft202012Validator.check_schema(schema)
    assert set(schema["properties"]) == SPEC_FIELDS
    nested = {key for f in fields(PipelineSpec) for key in file_keys(f) if "." in key}
    assert {key for key in _keys(schema["properties"]) if "." in key} == nested
    assert schema["$defs"]["column_type"]["anyOf"][0]["enum"] == [t.value for t in ColumnType]


def test_schema_states_the_models_defaults():
    stated = {key: prop["default"] for key, prop in _keys(spec_schema()["properties"]).items() if "default" in prop}
    assert stated == {key: value for key, value in SPEC_DEFAULTS.items() if value is not None}


def test_schema_allows_exactly_each_enum_fields_values():
    properties = spec_schema()["properties"]
    hints = get_type_hints(PipelineSpec)
    enums = {
        keys[0]: hints[f.name]
        for f in fields(PipelineSpec)
        if len(keys := file_keys(f)) == 1 and isinstance(hints[f.name], type) and issubclass(hints[f.name], enum.Enum)
    }
    assert set(enums) == {"format", "encoding", "decimal_handling_mode", "tombstones"}
    for key, values in enums.items():
        assert properties[key]["enum"] == [v.value for v in values], key
    by_name, by_mapping = properties["ordering"]["oneOf"]
    assert by_name["enum"] == by_mapping["properties"]["mode"]["enum"] == [m.value for m in OrderingMode]


def test_shipped_specs_are_valid_under_the_schema():
    validator = Draft202012Validator(spec_schema())
    for path in sorted((REPO / "pipelines").rglob("*.yaml")):  # the examples too
        assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == [], path
