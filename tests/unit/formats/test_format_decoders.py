"""Formats as one interface (issue 55 item 5): every format is a Decoder in a folder of its own,
registered in one place; nothing outside reprocess/formats branches on the format; core imports
nothing of formats; and moving the format rules into the decoders changed no spec's reading.

The expected readings below were printed by the code before the move (commit 034f205, where the
rules were branches in core/spec_parse.py and core/spec.py): each case's fingerprint, a hash of its
``as_dict`` (the audit view stored in ``reprocess.pipelines``) and its unchanged columns, or the
error the spec got. They are recorded values, not recomputed by the code under test.
"""

# ruff: noqa: E501 (the recorded errors are quoted whole)
from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path

import pytest

from reprocess.core.errors import SpecError
from reprocess.core.formats import Format
from reprocess.formats import decoders
from reprocess.formats.decoder import Decoder
from reprocess.formats.specs import parse_spec, read_spec

PACKAGE = Path(__file__).resolve().parents[3] / "reprocess"

BASE = {"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "integer", "v": "text"}}
COLUMN_V = {"mode": "column", "column": "v"}
CASES: dict[str, dict[str, object]] = {
    "avro": {"format": "avro", "columns": {"id": "text", "v": "double precision"}},
    "debezium_avro": {
        "format": "debezium",
        "encoding": "avro",
        "columns": {"id": "integer", "note": "text", "n": {"type": "bigint", "expr": "length(note)"}},
        "unavailable_value_placeholder": "X",
        "decimal_handling_mode": "precise",
    },
    "json_deletes": {"tombstones": "delete"},
    "encoding_on_json": {"encoding": "avro"},
    "encoding_on_avro": {"format": "avro", "encoding": "avro"},
    "placeholder_on_avro": {"format": "avro", "unavailable_value_placeholder": "X"},
    "decimal_on_json": {"decimal_handling_mode": "precise"},
    "bad_encoding": {"format": "debezium", "encoding": "xml"},
    "bad_placeholder": {"format": "debezium", "unavailable_value_placeholder": ""},
    "bad_decimal": {"format": "debezium", "decimal_handling_mode": "exact"},
    "debezium_dead_letter": {"format": "debezium", "tombstones": "dead_letter"},
    "debezium_value_ordering": {
        "format": "debezium",
        "columns": {"id": "integer", "v": {"type": "bigint", "required": True}},
        "ordering": COLUMN_V,
    },
    "debezium_lsn_ordering": {
        "format": "debezium",
        "columns": {"id": "integer", "v": {"type": "bigint", "path": "$source.lsn", "required": True}},
        "ordering": COLUMN_V,
    },
    "json_delete_by_column": {
        "columns": {"id": "integer", "v": {"type": "bigint", "required": True}},
        "ordering": COLUMN_V,
        "tombstones": "delete",
    },
    "string_is_json_on_avro": {
        "format": "avro",
        "columns": {"id": "integer", "v": {"type": "jsonb", "string_is_json": True}},
    },
    "string_is_json_on_json": {"columns": {"id": "integer", "v": {"type": "jsonb", "string_is_json": True}}},
    "envelope_path_on_avro": {
        "format": "avro",
        "columns": {"id": "integer", "v": {"type": "text", "path": "$source.lsn"}},
    },
    "envelope_path_in_where_on_json": {"where": "`$op` = 'c'"},
    "envelope_path_on_debezium": {
        "format": "debezium",
        "columns": {"id": "integer", "v": {"type": "text", "path": "$source.lsn"}},
    },
    "bad_path": {"columns": {"id": "integer", "v": {"type": "text", "path": "a..b"}}},
    "debezium_transform": {"format": "debezium", "transform": "m:f", "transform_version": "1"},
}

# Keys as_dict gained after the move (a new spec field, not a reading of an old one): left out of its hash.
ADDED_SINCE = ("audit",)


def _view(spec: object) -> str:
    return _digest({k: v for k, v in spec.as_dict().items() if k not in ADDED_SINCE})  # type: ignore[attr-defined]


# As the code before the move read each case: (fingerprint, as_dict hash, unchanged columns) or its error.
BEFORE: dict[str, object] = {
    "avro": ("c2d3dc78ba515efb", "1ff76e75eb256d3b", ()),
    "debezium_avro": ("a4c58d2014ee90af", "425f789c317ebeb8", ("note", "n")),
    "json_deletes": ("1860d2669fd029a2", "cd4dc5e122defb5f", ()),
    "encoding_on_json": "s.yaml: field 'encoding': only a debezium pipeline chooses its encoding; format json has one",
    "encoding_on_avro": "s.yaml: field 'encoding': only a debezium pipeline chooses its encoding; format avro has one",
    "placeholder_on_avro": "s.yaml: field 'unavailable_value_placeholder': only a debezium pipeline has one; format avro",
    "decimal_on_json": "s.yaml: field 'decimal_handling_mode': only a debezium pipeline has one; format json",
    "bad_encoding": "s.yaml: field 'encoding': 'xml' is not 'json' or 'avro'",
    "bad_placeholder": "s.yaml: field 'unavailable_value_placeholder': must be the connector's unavailable.value.placeholder text, got ''",
    "bad_decimal": "s.yaml: field 'decimal_handling_mode': 'exact' is not 'string' (also reads 'double') or 'precise': copy the connector's decimal.handling.mode",
    "debezium_dead_letter": "s.yaml: field 'tombstones': a debezium pipeline deletes on op d and tombstones: use 'delete'",
    "debezium_value_ordering": "s.yaml: field 'ordering.column': a debezium pipeline's deletes carry no row to read 'v' from: order it by offset (the default, as Debezium's own sinks do; a key's changes stay in order on its partition), or map 'v' to a commit-ordered envelope path ($...)",
    "debezium_lsn_ordering": ("78004c051bd8dc57", "4f80dd5c8140e161", ()),
    "json_delete_by_column": "s.yaml: field 'tombstones': 'delete' needs ordering: offset; this pipeline orders by 'v', and a tombstone (null value) has no version to compare, so an older version could resurrect the key or a newer one be deleted. Order the pipeline by offset to delete on tombstones, or keep them as dead letters",
    "string_is_json_on_avro": "s.yaml: field 'columns.v.string_is_json': only a json or jsonb column of the json format reads a JSON string as JSON text (avro and debezium strings always are JSON text)",
    "string_is_json_on_json": ("491d65f53afa3aae", "9d89e461efffae09", ()),
    "envelope_path_on_avro": "s.yaml: field 'columns.v.path': '$source.lsn' is a part of a Debezium envelope; this pipeline's format is avro",
    "envelope_path_in_where_on_json": "s.yaml: field 'where': '$op' is a part of a Debezium envelope; this pipeline's format is json",
    "envelope_path_on_debezium": ("f657b5a00a5e751c", "f1e0a36cd0c06dd6", ()),
    "bad_path": "s.yaml: field 'columns.v.path': must be a dotted path into the value like 'a.b', or one of $key, $key.<path>, $headers.<name>, $timestamp, $partition, $offset, $topic (debezium also $op, $ts_ms, $source.<path>), got 'a..b'",
    "debezium_transform": "s.yaml: field 'transform': a debezium pipeline cannot have a transform over columns a change event may leave out (['v']): Debezium leaves an unchanged large (TOASTed) value out of an update, and reprocess resolves it from the stored row at the commit, after Spark ran the function, so the function would get NULL there and the row would keep what it derived from NULL. Derive with `expr` columns and `where` instead (they follow left-out values: docs/formats/debezium.md), or stream the table with REPLICA IDENTITY FULL through Debezium's ExtractNewRecordState as a `format: json` pipeline, whose records carry every value",
}

# The example specs' (fingerprint, as_dict hash) before the move.
FILES = {
    "customers.yaml": ("3ee11f2482ddecab", "c5e01dc55de49b1b"),
    "orders.yaml": ("65fee29e083982a4", "73c1a75540f04998"),
    "payments.yaml": ("b4da6ac0a243eb6a", "a3c8404bc2092283"),
    "examples/customers_cdc.yaml": ("65a6a62d08740233", "b37a4feb67cac5c3"),
    "examples/invoices.yaml": ("d317e3662433465d", "2b6d455930940b67"),
    "examples/orders_avro.yaml": ("9cef9ff35e4c4ac2", "d2a43027f87dae67"),
}


def _digest(as_dict: object) -> str:
    return hashlib.sha256(json.dumps(as_dict, sort_keys=True).encode()).hexdigest()[:16]


def test_every_format_has_a_decoder_in_a_folder_of_its_own():
    for fmt in Format:
        found = decoders()[fmt]
        assert isinstance(found, Decoder) and found.format is fmt
        assert type(found).__module__ == f"reprocess.formats.{fmt.value}", "a format's decoder is its folder's __init__"
        assert (PACKAGE / "formats" / fmt.value / "__init__.py").is_file()


def test_nothing_outside_formats_branches_on_the_format():
    branches = re.compile(r"Format\.(JSON|AVRO|DEBEZIUM)|\.format (is|==|!=|in)\b|\bfmt (is|==)")
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "formats" not in path.relative_to(PACKAGE).parts
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if branches.search(line) and "_DEFAULT_FORMAT" not in line  # the default, not a branch on a format
    ]
    assert found == []


def test_core_imports_nothing_of_formats():
    found = []
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith("reprocess.formats")]
    assert found == []


@pytest.mark.parametrize("case", list(CASES))
def test_a_spec_reads_as_it_did_before_the_format_rules_moved_into_the_decoders(case):
    try:
        spec = parse_spec({**BASE, **CASES[case]}, source="s.yaml")
        got: object = (spec.fingerprint, _view(spec), spec.unchanged_columns)
    except SpecError as exc:
        got = str(exc).split("; and against the spec schema")[0]
    assert got == BEFORE[case]


def test_the_example_specs_keep_their_fingerprints_and_audit_views():
    folder = PACKAGE.parent / "pipelines"
    got = {name: (s.fingerprint, _view(s)) for name in FILES for s in [read_spec(folder / name)]}
    assert got == FILES
