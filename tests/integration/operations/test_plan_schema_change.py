"""A plan of a spec that changes the table's schema: the live table stays as it is until the apply.

On real Kafka, Spark (Connect) and Postgres. Planning a spec that adds a column must not run its
``ALTER TABLE`` on the live table (nor make the new spec version the live one): the diff migrates
inside its rolled-back transaction, so it counts the new column's values (none before, the derived
value after), and the apply that follows adds the column and fills it. The oracle reads the table
with plain psycopg2 (information_schema, an md5 of the rows) and recomputes the values from the
produced messages; it imports nothing of the product.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import psycopg2
import pytest
import yaml

from reprocess.core.errors import SchemaChangeError
from reprocess.core.runs import RunRequest
from tests.integration.operations.test_plan import _apply, _plan
from tests.support.helpers import PAYMENTS_SPEC, loaded_payments, orders_spec, plan_stage_commit

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
VAT = {"type": "numeric", "expr": "round(amount * 1.2, 2)"}


def _live(db_url: str, table: str, pipeline: str) -> dict[str, Any]:
    """The live table's columns and rows, and the spec version the pipeline is at, by plain SQL."""
    schema, name = table.split(".")
    with psycopg2.connect(re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", db_url)) as pg, pg.cursor() as cur:
        cur.execute(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, name),
        )
        columns = cur.fetchall()
        cur.execute(f'SELECT count(*), md5(string_agg(t::text, \'|\' ORDER BY t::text)) FROM "{schema}"."{name}" t')
        rows = cur.fetchone()
        cur.execute("SELECT spec_version, spec FROM reprocess.pipelines WHERE name = %s", (pipeline,))
        registered = cur.fetchone()
    pg.close()
    return {"columns": columns, "rows": rows, "pipeline": registered}


def _with_columns(name: str, **extra: Any) -> Any:
    columns = yaml.safe_load(PAYMENTS_SPEC.read_text())["columns"]
    return orders_spec(name, name, base=PAYMENTS_SPEC, columns={**columns, **extra})


def test_plan_of_an_added_column_leaves_the_live_table_unchanged_and_its_apply_adds_and_fills_the_column(
    kafka_config, engine, db_url, unique_name
):
    spec, produced = loaded_payments(engine, kafka_config, unique_name, 2, 300)
    amounts = {json.loads(v)["payment_id"]: Decimal(json.loads(v)["amount"]) for _p, _o, _k, v in produced.messages}
    expected = {k: (a * Decimal("1.2")).quantize(Decimal("0.01")) for k, a in amounts.items()}
    before = _live(db_url, spec.qualified_target, spec.name)
    assert "amount_with_vat" not in {c for c, _t, _n in before["columns"]}

    vat = _with_columns(unique_name, amount_with_vat=VAT)
    planned = _plan(engine, kafka_config, vat, f"{unique_name}-p")
    assert _live(db_url, spec.qualified_target, spec.name) == before  # no DDL, no row, no live spec version
    assert planned["total"]["updated"] == len(expected) and planned["columns"] == {"amount_with_vat": len(expected)}
    sample = planned["samples"]["updated"][0]
    assert sample["changes"] == {"amount_with_vat": [None, float(expected[sample["key"]["payment_id"]])]}

    applied = _apply(engine, kafka_config, vat, f"{unique_name}-p", f"{unique_name}-apply")
    assert applied == planned["apply"]
    after = _live(db_url, spec.qualified_target, spec.name)
    assert after["columns"] == [*before["columns"], ("amount_with_vat", "numeric", "YES")]
    with psycopg2.connect(re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", db_url)) as pg, pg.cursor() as cur:
        cur.execute(f"SELECT payment_id, amount_with_vat FROM {spec.qualified_target}")
        stored = dict(cur.fetchall())
    pg.close()
    assert stored == expected


def test_plan_of_a_spec_the_table_cannot_take_in_place_is_refused_naming_the_rebuild_and_changes_nothing(
    kafka_config, engine, db_url, unique_name
):
    spec, _produced = loaded_payments(engine, kafka_config, unique_name, 1, 50)
    before = _live(db_url, spec.qualified_target, spec.name)
    retyped = _with_columns(unique_name, version={"type": "numeric", "required": True})
    with pytest.raises(SchemaChangeError, match="mode=rebuild"):
        plan_stage_commit(engine, kafka_config, retyped, RunRequest.from_params({"preview": True}), f"{unique_name}-p")
    assert _live(db_url, spec.qualified_target, spec.name) == before
