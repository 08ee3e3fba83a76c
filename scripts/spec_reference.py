"""Render docs/spec.md, the spec reference, from the JSON Schema the package ships.

The schema (reprocess/core/spec.schema.json) is the one source: every field's type, default,
allowed values, description and example come from it, and one complete spec per format is
quoted from the shipped specs. tests/unit/docs/test_spec_reference.py fails when docs/spec.md and the
schema drift; `python scripts/spec_reference.py` (in the project venv) rewrites the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from reprocess.core.spec_schema import spec_schema

REPO: Final = Path(__file__).resolve().parent.parent
OUTPUT: Final = REPO / "docs" / "spec.md"
COMMAND: Final = "python scripts/spec_reference.py"
# One complete spec per format, quoted whole (tests/unit/docs/test_spec_reference.py validates them).
EXAMPLES: Final = {
    "json": REPO / "pipelines" / "orders.yaml",
    "avro": REPO / "pipelines" / "examples" / "orders_avro.yaml",
    "debezium": REPO / "pipelines" / "customers.yaml",
}
COLUMN_TYPE_REF: Final = "#/$defs/column_type"
# The column a ``columns.<name>.…`` field's example is nested under.
EXAMPLE_COLUMN: Final = "amount"


def type_text(prop: dict[str, Any]) -> str:
    """A property's type in words.

    Examples
    --------
    >>> type_text({"type": ["string", "null"]})
    'string or null'
    >>> type_text({"type": "array", "items": {"type": "string"}})
    'list of string'
    >>> type_text({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})
    'string or list of string'
    >>> type_text({"enum": ["a", "b"]})
    'string'
    """
    if prop.get("$ref") == COLUMN_TYPE_REF:
        return "column type"
    for either in ("oneOf", "anyOf"):
        if either in prop:
            return " or ".join(dict.fromkeys(type_text(p) for p in prop[either]))
    kinds = prop.get("type")
    if kinds is None and "enum" in prop:
        kinds = sorted({_json_type(v) for v in prop["enum"]})
    names = [kinds] if isinstance(kinds, str) else list(kinds or ["any"])
    words = {"object": "mapping"}
    if "array" in names:
        words["array"] = f"list of {type_text(prop.get('items', {}))}"
    return " or ".join(words.get(n, n) for n in names)


def _json_type(value: object) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(type(value), "null")


def allowed_text(prop: dict[str, Any]) -> str:
    """The values a property allows beyond its type (enums, patterns, bounds), or ''.

    Examples
    --------
    >>> allowed_text({"enum": ["json", "avro"]})
    '`json`, `avro`'
    >>> allowed_text({"type": "integer", "minimum": 1})
    'at least 1'
    >>> allowed_text({"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}})
    'at least 1 item; each: not empty'
    """
    if prop.get("$ref") == COLUMN_TYPE_REF:
        return "see [Column types](#column-types)"
    parts = []
    if "enum" in prop:
        parts.append(", ".join(f"`{json.dumps(v) if not isinstance(v, str) else v}`" for v in prop["enum"]))
    if "pattern" in prop:
        parts.append(f"matching `{prop['pattern']}`")
    if "minimum" in prop and "maximum" in prop:
        parts.append(f"{prop['minimum']} to {prop['maximum']}")
    elif "minimum" in prop:
        parts.append(f"at least {prop['minimum']}")
    if prop.get("minLength"):
        parts.append("not empty")
    if "minItems" in prop:
        parts.append(f"at least {prop['minItems']} item" + ("s" if prop["minItems"] != 1 else ""))
    if "minProperties" in prop:
        parts.append(f"at least {prop['minProperties']} entry")
    if "propertyNames" in prop:
        parts.append(f"names matching `{prop['propertyNames']['pattern']}`")
    for either in ("oneOf", "anyOf"):
        alternatives = [a for a in map(allowed_text, prop.get(either, [])) if a]
        if alternatives:
            parts.append("; or ".join(alternatives))
    items = allowed_text(prop["items"]) if "items" in prop else ""
    if items:
        parts.append(f"each: {items}")
    return "; ".join(parts)


def _yaml_value(value: object) -> str:
    """A value as YAML flow text (JSON is YAML)."""
    return json.dumps(value, ensure_ascii=False)


def field_section(key: str, prop: dict[str, Any], required: bool) -> Iterator[str]:
    """The section of one field: a heading, its facts, its description and an example."""
    yield f"### `{key}`"
    yield ""
    yield f"- **Type:** {type_text(prop)}" + (" (required)" if required else "")
    if "default" in prop:
        yield f"- **Default:** `{_yaml_value(prop['default'])}`"
    allowed = allowed_text(prop)
    if allowed:
        yield f"- **Allowed:** {allowed}"
    yield ""
    yield prop["description"]
    yield ""
    yield "```yaml"
    *parents, leaf = key.replace("<name>", EXAMPLE_COLUMN).split(".")
    for depth, parent in enumerate(parents):
        yield "  " * depth + f"{parent}:"
    yield "  " * len(parents) + f"{leaf}: {_yaml_value(prop['examples'][0])}"
    yield "```"
    yield ""


def fields(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Every field with its dotted name (``reconcile.cron``, ``columns.<name>.path``), in schema order."""
    required = set(schema.get("required", []))
    for key, prop in schema["properties"].items():
        yield key, prop, key in required
        mapping_forms = [prop, _column_object(prop), *prop.get("oneOf", [])]
        nested = next((form["properties"] for form in mapping_forms if "properties" in form), {})
        prefix = f"{key}.<name>." if key == "columns" else f"{key}."
        for sub_key, sub_prop in nested.items():
            yield prefix + sub_key, sub_prop, False


def _column_object(prop: dict[str, Any]) -> dict[str, Any]:
    """The mapping form of a column (``{type, path, expr, required}``), or {} for other fields."""
    forms = prop.get("additionalProperties", {}) if isinstance(prop.get("additionalProperties"), dict) else {}
    return next((f for f in forms.get("oneOf", []) if f.get("type") == "object"), {})


def render(schema: dict[str, Any] | None = None) -> str:
    """docs/spec.md's text."""
    schema = spec_schema() if schema is None else schema
    column_type = schema["$defs"]["column_type"]
    names, numeric = column_type["anyOf"]
    lines = [
        "# Pipeline spec reference",
        "",
        f"<!-- Generated from reprocess/core/spec.schema.json by `{COMMAND}`; do not edit. -->",
        "",
        schema["description"],
        "",
        "The same schema ships in the package (`reprocess/core/spec.schema.json`): point your editor's",
        "YAML language server at it for completion. Required fields: "
        + ", ".join(f"`{k}`" for k in schema["required"])
        + ". Every other field has the default shown, or none (not set).",
        "",
        "## Fields",
        "",
    ]
    for key, prop, required in fields(schema):
        lines.extend(field_section(key, prop, required))
    lines += [
        "## Column types",
        "",
        column_type["description"],
        "",
        "- " + ", ".join(f"`{n}`" for n in names["enum"]),
        f"- `numeric(p,s)` or `numeric(p)`: matching `{numeric['pattern']}`",
        "",
        "```yaml",
        f"amount: {column_type['examples'][0]}",
        "```",
        "",
        "## One complete spec per format",
        "",
    ]
    for fmt, path in EXAMPLES.items():
        lines += [f"### `format: {fmt}`", "", f"`{path.relative_to(REPO)}`:", "", "```yaml"]
        lines += [path.read_text().rstrip("\n"), "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
