"""The JSON Schema of a spec file, and its problems as field, problem and fix.

One schema for every reader of a spec: :func:`reprocess.formats.specs.parse_spec` refuses a spec
it does not accept (so the DAG factory, the Spark job and ``reprocess validate`` give the same
verdict), and ``reprocess validate`` lists every problem at once. Editors read the same file.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from importlib.resources import files
from typing import Any, Final

SCHEMA_FILE: Final = "spec.schema.json"


@dataclass(frozen=True, slots=True)
class SchemaProblem:
    """One place where a spec breaks the schema: the dotted field, what is wrong, what to write."""

    field: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}; fix: {self.fix}"


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file (``reprocess/core/spec.schema.json`` in the installed package)."""
    return dict(json.loads((files("reprocess.core") / SCHEMA_FILE).read_text()))


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

    return Draft202012Validator(spec_schema())


def schema_problems(raw: object) -> list[SchemaProblem]:
    """Every place ``raw`` breaks the schema, sorted by field."""
    errors = sorted(_validator().iter_errors(raw), key=lambda e: list(map(str, e.absolute_path)))
    return [_problem(e) for e in errors]


def _problem(error: Any) -> SchemaProblem:
    """A JSON Schema error as the field it names, what is wrong and what to write instead.

    A ``oneOf`` failure (a column as a type name or a mapping) is reported as its most relevant
    branch's error ("'money' is not one of ..."), not as "not valid under any of the schemas".
    """
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

    form = ("type", "enum", "pattern", "oneOf", "anyOf")
    while error.validator in ("oneOf", "anyOf") and error.context:
        # A branch refusing the instance's whole form (a mapping is not a type name, a name matches no
        # pattern) says the least; of those, the list of names says the most.
        deeper = [e for e in error.context if e.relative_path or e.validator not in form]
        named = [e for e in error.context if e.validator == "enum"]
        nested = [e for e in error.context if e.validator in ("oneOf", "anyOf")]
        found = deeper or named or nested or error.context
        error = found[0] if len(found) == 1 else best_match(found)  # best_match descends on its own
    where = ".".join(map(str, error.absolute_path)) or "(top level)"
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        unknown = [k for k in error.instance if k not in allowed] if isinstance(error.instance, Mapping) else []
        close = {k: get_close_matches(str(k), allowed, n=1) for k in unknown}
        fix = "; ".join(f"{k!r}: did you mean {m[0]!r}?" if m else f"remove {k!r}" for k, m in close.items())
        fix += f" (allowed here: {', '.join(allowed)})"
    elif error.validator == "required":
        fix = "add the field"
    elif error.validator == "enum":
        fix = f"use one of {', '.join(map(repr, schema.get('enum', ())))}"
    else:
        fix = schema.get("description") or f"see reprocess/core/spec.schema.json at {where}"
    return SchemaProblem(where, error.message, fix)
