"""Transforms in the spec (expr, where, transform): checked when the spec loads, naming the file
and the field; the fingerprint changes with each of them and stays as it was without them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reprocess.core.derive import rewrite
from reprocess.core.errors import SpecError
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import parse_spec, read_spec

ORDERS = Path(__file__).resolve().parents[3] / "pipelines" / "orders.yaml"


def _spec(**extra: Any) -> PipelineSpec:
    columns = {
        "id": {"type": "text", "required": True},
        "region": "text",
        "amount": {"type": "numeric", "expr": "amount_cents / 100.0"},
    }
    columns.update(extra.pop("columns", {}))
    raw = {"name": "p", "topics": ["t"], "key": ["id"], "columns": columns, **extra}
    return parse_spec(raw, source="pipelines/p.yaml")


def test_expr_reads_value_fields_the_decoder_must_extract() -> None:
    spec = _spec(where="region <> 'test' AND meta.flag IS NULL")
    assert spec.value_fields == ("amount_cents", "meta.flag")
    assert [c.expr for c in spec.columns] == [None, None, "amount_cents / 100.0"]


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ({"columns": {"amount": {"type": "numeric", "expr": "amount_cents /"}}}, "columns.amount.expr", "not a valid"),
        ({"columns": {"amount": {"type": "numeric", "expr": "x; DROP TABLE y"}}}, "columns.amount.expr", "ONE"),
        ({"columns": {"amount": {"type": "numeric", "expr": "1 + (SELECT 1)"}}}, "columns.amount.expr", "subquery"),
        ({"columns": {"amount": {"type": "numeric", "expr": "'open"}}}, "columns.amount.expr", "unclosed quote"),
        ({"columns": {"amount": {"type": "numeric", "expr": "a", "path": "a"}}}, "columns.amount.expr", "not both"),
        ({"columns": {"net": {"type": "numeric", "expr": "amount * 2"}}}, "columns.net.expr", "itself an expr"),
        ({"where": "region = "}, "where", "not a valid"),
        ({"where": "region.x = 1"}, "where", "not a JSON object"),
        ({"transform": "shop.fixes:fix"}, "transform_version", "bump"),
        ({"transform_version": 2}, "transform_version", "only meaningful"),
        ({"transform": "shop/fixes.py", "transform_version": 1}, "transform", "package.module:function"),
    ],
)
def test_a_bad_transform_fails_the_spec_naming_file_and_field(extra: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(SpecError, match=rf"^pipelines/p\.yaml: field '{field}': .*{says}"):
        _spec(**extra)


def test_a_derived_key_cannot_be_deleted_by_a_tombstone() -> None:
    with pytest.raises(SpecError, match=r"columns\.id\.expr.*tombstone"):
        _spec(columns={"id": {"type": "text", "expr": "lower(raw_id)"}}, tombstones="delete")


def test_each_transform_enters_the_fingerprint_and_specs_without_them_keep_theirs() -> None:
    assert read_spec(ORDERS).fingerprint == "65fee29e083982a4"  # as before transforms existed
    base = _spec(transform="shop.fixes:fix", transform_version=1)
    changed = [
        _spec(transform="shop.fixes:fix", transform_version=2),
        _spec(transform="shop.fixes:other", transform_version=1),
        _spec(transform="shop.fixes:fix", transform_version=1, where="region <> 'test'"),
        _spec(transform="shop.fixes:fix", transform_version=1,
              columns={"amount": {"type": "numeric", "expr": "amount_cents / 1000.0"}}),
    ]  # fmt: skip
    assert len({base.fingerprint, *(s.fingerprint for s in changed)}) == 1 + len(changed)
    assert base.as_dict()["transform_version"] == "1"


def test_rewrite_replaces_names_and_keeps_lambda_parameters() -> None:
    out = rewrite("aggregate(items, 0, (acc, x) -> acc + x) + region", lambda parts: f"_c_{'_'.join(parts)}")
    assert out == "AGGREGATE(_c_items, 0, (acc, x) -> acc + x) + _c_region"


@pytest.mark.parametrize(
    ("field", "text", "named"),
    [
        ("columns.amount.expr", "current_timestamp()", "current_timestamp"),
        ("columns.amount.expr", "unix_timestamp()", "current_timestamp"),
        ("columns.amount.expr", "datediff(current_date(), to_date(day))", "current_date"),
        ("columns.amount.expr", "now()", "now"),
        ("columns.amount.expr", "localtimestamp()", "localtimestamp"),
        ("columns.amount.expr", "amount_cents * rand()", "rand"),
        ("columns.amount.expr", "randn(7)", "randn"),
        ("columns.amount.expr", "random()", "rand"),
        ("columns.amount.expr", "length(uuid())", "uuid"),
        ("columns.amount.expr", "size(shuffle(items))", "shuffle"),
        ("columns.amount.expr", "monotonically_increasing_id()", "monotonically_increasing_id"),
        ("columns.amount.expr", "spark_partition_id()", "spark_partition_id"),
        ("columns.amount.expr", "length(input_file_name())", "input_file_name"),
        ("columns.amount.expr", "length(current_user())", "current_user"),
        ("columns.amount.expr", "sum(amount_cents) OVER (PARTITION BY region)", "OVER"),
        ("where", "_kafka_timestamp > current_timestamp() - INTERVAL 1 DAY", "current_timestamp"),
        ("where", "rand() < 0.5", "rand"),
    ],
)
def test_a_derivation_that_is_not_a_function_of_the_record_is_refused_with_the_fix(
    field: str, text: str, named: str
) -> None:
    """Another value per run would rewrite every row on a replay and fail the value check daily."""
    extra: dict[str, Any] = (
        {"where": text} if field == "where" else {"columns": {"amount": {"type": "numeric", "expr": text}}}
    )
    with pytest.raises(SpecError) as caught:
        _spec(**extra)
    message = str(caught.value)
    assert message.startswith(f"pipelines/p.yaml: field '{field}': ")
    assert named in message and "not a function of the record" in message and "_kafka_timestamp" in message


def test_deterministic_functions_and_names_like_them_pass() -> None:
    spec = _spec(
        columns={
            "amount": {"type": "numeric", "expr": "try_divide(amount_cents, 100.0)"},
            "seen": {"type": "timestamptz", "expr": "to_timestamp(random)"},  # a value field named "random"
            "day": {"type": "date", "expr": "date_add(to_date(_kafka_timestamp), 1)"},
        },
        where="xxhash64(_kafka_key) % 10 <> 0",
    )
    assert spec.value_fields == ("amount_cents", "random")


def test_validate_and_the_dag_factory_refuse_a_nondeterministic_spec(tmp_path: Path) -> None:
    """Both read a file through ``parse_spec``: validate reports it, the factory's folder marks it broken."""
    from reprocess.formats.specs import read_folder
    from reprocess.operations.validate import validate_offline

    bad = tmp_path / "p.yaml"
    bad.write_text(
        "name: p\ntopics: [t]\nkey: [id]\ncolumns:\n  id: {type: text, required: true}\n"
        "  loaded_at: {type: timestamptz, expr: 'current_timestamp()'}\n"
    )
    findings = [f for f in validate_offline([bad]).errors if "not a function of the record" in f.problem]
    assert [f.source for f in findings] == [str(bad)]
    assert "columns.loaded_at.expr" in findings[0].problem
    assert "not a function of the record" in str(read_folder(tmp_path).broken[bad])
