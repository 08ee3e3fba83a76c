"""Pipeline specs: the shipped YAML loads, and every error names the file and the field (no services)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg2 import sql

from reprocess.core.errors import SettingError, SpecError
from reprocess.core.ordering import Ordering, OrderingMode
from reprocess.core.spec import ColumnType
from reprocess.formats.specs import load_specs, parse_spec, read_folder, read_spec

ORDERS_YAML = Path(__file__).resolve().parents[3] / "pipelines" / "orders.yaml"


def orders_raw(**overrides: Any) -> dict[str, Any]:
    raw = yaml.safe_load(ORDERS_YAML.read_text())
    raw.update(overrides)
    return raw


def write_spec(directory: Path, raw: dict[str, Any], filename: str = "spec.yaml") -> Path:
    path = directory / filename
    path.write_text(yaml.safe_dump(raw))
    return path


def test_orders_yaml_loads_into_a_typed_spec():
    spec = read_spec(ORDERS_YAML)
    assert spec.name == "orders"
    assert spec.topics == ("orders",)
    assert spec.consumer_group == "reprocess-orders"
    assert spec.key == ("order_id",)
    assert spec.qualified_target == "public.orders"
    assert spec.ordering == Ordering(OrderingMode.OFFSET, None)
    assert spec.batch_size == 4_000_000
    assert spec.schedule == "@hourly"
    assert spec.source_file == str(ORDERS_YAML)
    columns = {c.name: c for c in spec.columns}
    assert columns["amount"].type is ColumnType.NUMERIC and not columns["amount"].required
    assert columns["updated_at"].type is ColumnType.TIMESTAMPTZ and columns["updated_at"].required
    assert [c.name for c in spec.key_columns] == ["order_id"]


def test_key_columns_are_always_required():
    spec = parse_spec(orders_raw(columns={"order_id": {"type": "text", "required": False}}))
    assert spec.columns[0].required


def test_column_ordering_names_its_column():
    spec = parse_spec(orders_raw(ordering={"mode": "column", "column": "updated_at"}))
    assert spec.ordering == Ordering(OrderingMode.COLUMN, "updated_at", ColumnType.TIMESTAMPTZ)
    assert spec.ordering.fields == ("updated_at", "_kafka_topic", "_kafka_partition", "_kafka_offset")


@pytest.mark.parametrize(
    "overrides, field, problem",
    [
        pytest.param({"colour": "blue"}, "colour", "unknown field", id="unknown-field"),
        pytest.param(
            {"columns": {"order_id": "text", "amount": {"type": "money"}}},
            "columns.amount.type",
            "'money' is not one of",
            id="bad-column-type",
        ),
        pytest.param({"key": ["order_ref"]}, "key", "must list one or more of the columns", id="key-not-a-column"),
        pytest.param({"key": []}, "key", "must list one or more of the columns", id="key-empty"),
        pytest.param({"name": "Orders-V2"}, "name", "not a lowercase SQL identifier", id="bad-name-identifier"),
        pytest.param(
            {"columns": {"order_id": "text", "Order Date": "text"}},
            "columns.Order Date",
            "not a lowercase SQL identifier",
            id="bad-column-identifier",
        ),
        pytest.param(
            {"target_table": "public.orders;drop"}, "target_table", "not a lowercase SQL identifier", id="bad-table"
        ),
        pytest.param(
            {"ordering": {"mode": "column"}}, "ordering.column", "must name one of the columns", id="ordering-no-column"
        ),
        pytest.param(
            {"ordering": {"mode": "column", "column": "version"}},
            "ordering.column",
            "must name one of the columns",
            id="ordering-column-missing",
        ),
        pytest.param(
            {"ordering": {"mode": "column", "column": "amount"}},
            "ordering.column",
            "column 'amount' must be required",
            id="ordering-column-not-required",
        ),
        pytest.param(
            {"topics": ["orders", "orders_eu"]},
            "ordering",
            "offset ordering cannot order one key's records across the topics",
            id="offset-ordering-several-topics",
        ),
        pytest.param({"tombstones": "purge"}, "tombstones", "is not 'dead_letter' or 'delete'", id="tombstones-bad"),
        pytest.param(
            {"tombstones": "delete", "ordering": {"mode": "column", "column": "updated_at"}},
            "tombstones",
            "'delete' needs ordering: offset",
            id="tombstones-delete-under-column-ordering",
        ),
        pytest.param({"ordering": "newest"}, "ordering.mode", "is not 'offset' or 'column'", id="ordering-bad-mode"),
        pytest.param({"batch_size": 0}, "batch_size", "must be a positive integer", id="batch-size-zero"),
        pytest.param({"batch_size": -5}, "batch_size", "must be a positive integer", id="batch-size-negative"),
        pytest.param({"batch_size": True}, "batch_size", "must be a positive integer", id="batch-size-bool"),
        pytest.param({"topics": []}, "topics", "non-empty list", id="no-topics"),
        pytest.param({"max_dead_letter_ratio": 1.5}, "max_dead_letter_ratio", "in [0, 1]", id="ratio-above-one"),
    ],
)
def test_spec_error_names_the_file_and_the_field(tmp_path, overrides, field, problem):
    path = write_spec(tmp_path, orders_raw(**overrides))
    with pytest.raises(SpecError) as caught:
        read_spec(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: field '{field}': "), message
    assert problem in message


def test_lineage_column_names_are_reserved(tmp_path):
    path = write_spec(tmp_path, orders_raw(columns={"order_id": "text", "_kafka_offset": "bigint"}))
    with pytest.raises(SpecError, match=re.escape(f"{path}: field 'columns._kafka_offset': names starting with")):
        read_spec(path)


def test_invalid_yaml_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match=re.escape(f"{path}: not valid YAML")):
        read_spec(path)


def test_a_spec_that_is_not_a_mapping_names_the_file(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- orders\n")
    with pytest.raises(SpecError, match=re.escape(f"{path}: a pipeline spec must be a mapping")):
        read_spec(path)


def test_load_specs_returns_every_spec_sorted_by_file(tmp_path):
    write_spec(tmp_path, orders_raw(name="b_orders", target_table="public.b_orders"), "b.yaml")
    write_spec(tmp_path, orders_raw(name="a_orders", target_table="public.a_orders"), "a.yaml")
    (tmp_path / "notes.txt").write_text("not a spec")
    assert [s.name for s in load_specs(tmp_path)] == ["a_orders", "b_orders"]


def test_load_specs_refuses_two_files_with_the_same_pipeline_name(tmp_path):
    first = write_spec(tmp_path, orders_raw(), "a.yaml")
    second = write_spec(tmp_path, orders_raw(), "b.yaml")
    with pytest.raises(SpecError) as caught:
        load_specs(tmp_path)
    assert str(caught.value) == f"{second}: field 'name': 'orders' is also used by {first}"


def test_a_broken_file_costs_its_own_spec_only(tmp_path):
    healthy = write_spec(tmp_path, orders_raw(name="a_orders", target_table="public.a_orders"), "a.yaml")
    typo = tmp_path / "b.yaml"
    typo.write_text("name: b_orders\ntopics: [t]\nkey: [id]\ncolumns:\n  id: {type: money}\n")
    duplicate = write_spec(tmp_path, orders_raw(name="a_orders", target_table="public.c_orders"), "c.yaml")

    folder = read_folder(tmp_path)

    assert [s.name for s in folder.specs] == ["a_orders"]
    assert list(folder.broken) == [typo, duplicate]
    assert str(folder.broken[typo]).startswith(f"{typo}: field 'columns.id.type': 'money' is not one of")
    assert str(folder.broken[duplicate]) == f"{duplicate}: field 'name': 'a_orders' is also used by {healthy}"
    with pytest.raises(SpecError, match=re.escape(f"{typo}: field 'columns.id.type'")):
        load_specs(tmp_path)


def test_an_installed_package_has_no_default_folder_of_specs_and_names_the_setting(monkeypatch):
    from reprocess.airflow.settings import pipelines_dir

    monkeypatch.delenv("REPROCESS_PIPELINES_DIR", raising=False)
    monkeypatch.delenv("AIRFLOW__REPROCESS__PIPELINES_DIR", raising=False)
    with pytest.raises(SettingError, match=re.escape("set Airflow's [reprocess] pipelines_dir")):
        pipelines_dir()
    monkeypatch.setenv("AIRFLOW__REPROCESS__PIPELINES_DIR", "/opt/specs")
    assert pipelines_dir() == Path("/opt/specs")
    monkeypatch.setenv("REPROCESS_PIPELINES_DIR", "/tmp/specs")
    assert pipelines_dir() == Path("/tmp/specs")


def test_load_specs_refuses_two_specs_with_one_target_table(tmp_path):
    first = write_spec(tmp_path, orders_raw(name="a_orders"), "a.yaml")
    second = write_spec(tmp_path, orders_raw(name="b_orders"), "b.yaml")
    with pytest.raises(SpecError) as caught:
        load_specs(tmp_path)
    assert str(caught.value).startswith(
        f"{second}: field 'target_table': public.orders is also the target of {first}; two pipelines cannot share"
    )


def test_a_bookkeeping_schema_is_never_a_target():
    with pytest.raises(SpecError, match="'reprocess_deleted' holds the pipelines' bookkeeping"):
        parse_spec(orders_raw(target_table="reprocess_deleted.orders"))


@pytest.mark.parametrize("kind", ["json", "jsonb", "text[]", "bigint[]", "numeric(39,0)"])
def test_an_ordering_column_the_two_engines_cannot_order_alike_is_refused(kind: str) -> None:
    """PostgreSQL has no order for json, orders jsonb and arrays by rules of its own, and Spark's
    decimal holds 38 digits: Spark's dedupe and the merge would pick other winners."""
    raw = orders_raw(ordering={"mode": "column", "column": "v"})
    raw["columns"]["v"] = {"type": kind, "required": True}
    with pytest.raises(SpecError, match=rf"field 'ordering.column': column 'v' is {re.escape(kind)}, which Spark"):
        parse_spec(raw)


def test_a_text_ordering_column_and_the_topic_compare_byte_wise_in_postgres() -> None:
    """As Spark compares strings, whatever the database's collation (rendered without a connection:
    the composed parts)."""
    by_text = parse_spec(orders_raw(ordering={"mode": "column", "column": "status"})).ordering
    by_time = parse_spec(orders_raw(ordering={"mode": "column", "column": "updated_at"})).ordering
    for ordering, collated in ((by_text, ["status", "_kafka_topic"]), (by_time, ["_kafka_topic"])):
        parts = repr(ordering.newer_sql(sql.Identifier("t"), sql.SQL("EXCLUDED")))
        assert parts.count("COLLATE") == 2 * len(collated)
        newest_first = repr(ordering.newest_first_sql())
        assert newest_first.count("COLLATE") == len(collated)
        assert all(f"Identifier('{c}'), SQL(' COLLATE \"C\"')" in newest_first for c in collated)
