"""Spec rules of the avro and debezium formats and of columns from a record's key, headers and
metadata: each mistake is refused at load with the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reprocess.core.errors import ConnectionConfigError, SpecError
from reprocess.core.spec import Encoding, Format, TombstoneMode
from reprocess.core.stage_rows import LINKS, UNCHANGED, stage_columns
from reprocess.formats import record_parts
from reprocess.formats.specs import load_specs, parse_spec
from reprocess.kafka.registry import client_config

EXAMPLES = Path(__file__).resolve().parents[3] / "pipelines" / "examples"


def _cdc(**overrides: Any) -> dict[str, Any]:
    return {"name": "cdc", "topics": ["db.public.t"], "format": "debezium", "key": ["id"],
            "ordering": {"mode": "column", "column": "lsn"},
            "columns": {"id": "bigint", "v": "text",
                        "lsn": {"type": "bigint", "path": "$source.lsn", "required": True}},
            **overrides}  # fmt: skip


def test_debezium_deletes_by_its_source_position_and_defaults_to_json():
    spec = parse_spec(_cdc())
    assert (spec.format, spec.encoding, spec.tombstones) == (Format.DEBEZIUM, Encoding.JSON, TombstoneMode.DELETE)
    assert not spec.needs_registry
    assert parse_spec(_cdc(encoding="avro")).needs_registry


def test_the_fingerprint_changes_with_the_format_but_not_for_json_specs():
    json_spec = {"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}}
    assert parse_spec(json_spec).fingerprint == parse_spec(
        {**json_spec, "format": "json"}).fingerprint  # fmt: skip
    assert parse_spec(_cdc()).fingerprint != parse_spec(_cdc(encoding="avro")).fingerprint
    # Debezium's own placeholder, written out or not, keeps the fingerprint; another one changes it.
    default = parse_spec(_cdc(unavailable_value_placeholder="__debezium_unavailable_value"))
    assert default.fingerprint == parse_spec(_cdc()).fingerprint
    assert parse_spec(_cdc(unavailable_value_placeholder="<t>")).fingerprint != default.fingerprint


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_cdc(tombstones="dead_letter"), "field 'tombstones': a debezium pipeline deletes"),
        (
            _cdc(columns={"id": "bigint", "lsn": {"type": "bigint", "required": True}}),
            "field 'ordering.column': a debezium pipeline's deletes carry no row to read 'lsn' from: order it by "
            "offset",
        ),
        (_cdc(unavailable_value_placeholder=""), "field 'unavailable_value_placeholder': must be the connector's"),
        (
            {
                "name": "p",
                "topics": ["t"],
                "key": ["id"],
                "columns": {"id": "text"},
                "unavailable_value_placeholder": "x",
            },
            "field 'unavailable_value_placeholder': only a debezium pipeline has one",
        ),
        (_cdc(format="protobuf"), "field 'format': 'protobuf' is not one of: json, avro, debezium"),
        (
            {
                "name": "p",
                "topics": ["t"],
                "key": ["id"],
                "format": "avro",
                "encoding": "json",
                "columns": {"id": "text"},
            },
            "field 'encoding': only a debezium pipeline chooses its encoding",
        ),
        (
            {"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text", "l": {"path": "$source.lsn"}}},
            "field 'columns.l.path': '$source.lsn' is a part of a Debezium envelope",
        ),
        (
            {"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text", "x": {"path": "$value"}}},
            "field 'columns.x.path': must be a dotted path into the value",
        ),
    ],
)
def test_format_mistakes_are_refused_with_the_field(raw, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("$", r"\$")):
        parse_spec(raw, source="p.yaml")


def test_columns_from_the_key_headers_and_metadata():
    spec = parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {
        "id": {"type": "bigint", "path": "$key.id"}, "kind": {"path": "$headers.event-type"},
        "at": {"type": "timestamptz", "path": "$timestamp"}, "p": {"type": "integer", "path": "$partition"},
        "k": {"path": "$key"}, "v": "text"}})  # fmt: skip
    assert [c.from_value for c in spec.columns] == [False, False, False, False, False, True]
    assert record_parts.reads_headers(spec)  # the read asks Spark's source for the headers


def test_only_a_spec_that_reads_a_header_asks_the_read_for_headers():
    plain = parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}})
    in_expr = parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {
        "id": "text", "tag": {"expr": "concat(id, `$headers.kind`)"}}})  # fmt: skip
    assert not record_parts.reads_headers(plain) and record_parts.reads_headers(in_expr)


def test_expressions_read_record_and_envelope_parts_by_their_dollar_path():
    cdc = parse_spec(_cdc(where="`$source.lsn` > 0 AND `$headers.kind` = 'x'", columns={
        "id": "bigint", "v": "text", "lsn": {"type": "bigint", "path": "$source.lsn", "required": True},
        "tag": {"expr": "concat(v, `$key.id`)"}}))  # fmt: skip
    assert cdc.value_fields == ("$key.id", "$source.lsn", "$headers.kind")
    json_spec = {"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}, "where": "`$source.lsn` > 0"}
    with pytest.raises(SpecError, match=r"field 'where': '\$source.lsn' is a part of a Debezium envelope"):
        parse_spec(json_spec, source="p.yaml")


def test_only_a_debezium_rows_values_may_be_left_out_and_the_stage_lists_them():
    cdc = parse_spec(_cdc(columns={"id": "bigint", "v": "text", "n": "numeric",
        "lsn": {"type": "bigint", "path": "$source.lsn", "required": True}, "x": {"expr": "upper(v)"}}))  # fmt: skip
    assert cdc.unchanged_columns == ("v", "n", "x")  # not the key or an envelope part; an expr when its inputs are
    assert stage_columns(cdc)[-1 - len(LINKS) :] == [UNCHANGED, *LINKS]
    json_spec = parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}})
    assert json_spec.unchanged_columns == () and UNCHANGED not in stage_columns(json_spec)


def test_the_registry_connection_becomes_the_client_config():
    assert client_config({"url": "https://r/apis/ccompat/v7", "login": None, "extra": {"ssl.ca.location": "/ca",
                          "bogus": 1}}) == {"url": "https://r/apis/ccompat/v7", "ssl.ca.location": "/ca",
                                            "timeout": 30}  # fmt: skip
    with pytest.raises(ConnectionConfigError, match="host to the registry's URL"):
        client_config({"url": "registry:8081"})


def test_the_example_specs_load():
    assert {s.format for s in load_specs(EXAMPLES)} == set(Format)


def test_validate_reads_the_spec_s_registry_connection_and_names_a_missing_one(monkeypatch):
    from reprocess.cli.validate import registry
    from reprocess.core.errors import ConnectionConfigError

    spec = parse_spec(_cdc(encoding="avro", schema_registry="my_registry"))
    monkeypatch.delenv("AIRFLOW_CONN_MY_REGISTRY", raising=False)
    with pytest.raises(ConnectionConfigError, match="`airflow connections add my_registry --conn-type http"):
        registry(spec)
    monkeypatch.setenv("AIRFLOW_CONN_MY_REGISTRY", '{"conn_type": "http", "host": "http://r:1/apis/ccompat/v7", '
                       '"login": "u", "password": "p"}')  # fmt: skip
    expected = {"url": "http://r:1/apis/ccompat/v7", "basic.auth.user.info": "u:p", "timeout": 30}
    assert registry(spec) == expected
    assert registry(parse_spec(_cdc())) is None  # JSON-encoded: no registry


def test_a_debezium_transform_over_values_an_event_may_leave_out_is_refused_with_the_reason_and_the_fix():
    """Issue 36's remainder: a transform runs in Spark, before the commit resolves the values a change
    event left out, so it would see NULL there and write what it derived from it: refused at load."""
    transform = {"transform": "tests.support.transform_fns:v1", "transform_version": 1}
    with pytest.raises(SpecError) as refused:
        parse_spec(_cdc(**transform), source="p.yaml")
    message = str(refused.value)
    assert "p.yaml: field 'transform': " in message and "['v']" in message, message
    assert "NULL" in message and "REPLICA IDENTITY FULL" in message and "expr" in message, message
    # A debezium spec none of whose columns can be left out (key and envelope parts) may have one.
    only_key = _cdc(columns={"id": "bigint", "lsn": {"type": "bigint", "path": "$source.lsn", "required": True}},
                    ordering="offset", **transform)  # fmt: skip
    assert parse_spec(only_key).transform is not None


def test_the_tombstone_rule_and_the_record_limit_enter_the_fingerprint_and_specs_on_their_defaults_keep_theirs():
    """Both change what a replay writes (a tombstone deletes or is a dead letter; a record over the
    limit is a dead letter), so a plan made under one is stale under the other."""
    json_spec = {"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}}
    plain = parse_spec(json_spec).fingerprint
    assert parse_spec({**json_spec, "tombstones": "dead_letter", "max_record_bytes": 1_048_576}).fingerprint == plain
    changed = [parse_spec({**json_spec, "tombstones": "delete"}), parse_spec({**json_spec, "max_record_bytes": 2048})]
    assert len({plain, *(s.fingerprint for s in changed)}) == 3
    assert parse_spec(_cdc(tombstones="delete")).fingerprint == parse_spec(_cdc()).fingerprint  # debezium's only rule
