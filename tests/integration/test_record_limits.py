"""Records PostgreSQL cannot hold where the Spark checks pass them (issue 39, items 2 and 7): a key
longer than PostgreSQL's btree index row limit is a dead letter naming the limit (never a merge that
fails with SQLSTATE 54000 on every attempt), and a key's newest record that PostgreSQL refuses at the
stage lets the key's newest storable record of the run land. Expected rows and dead letters come
from what each test sends; the oracle reads PostgreSQL with SQL alone.
"""

from __future__ import annotations

import base64
import json
import os

import pytest

from reprocess.core.runs import RunRequest
from reprocess.operations.plan import plan_run
from reprocess.postgres.commit import commit_run
from tests.support.helpers import orders_spec, run_spark_stage
from tests.support.hostile_corpus import Case
from tests.support.hostile_run import produce_corpus, snapshot

pytestmark = [pytest.mark.integration("postgres"), pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

_COLUMNS = {"id": {"type": "text", "required": True}, "t": "text"}


def test_a_key_over_the_btree_index_row_limit_is_a_dead_letter_and_the_run_commits(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name, key=["id"], columns=_COLUMNS, tombstones="delete",
                       max_dead_letter_ratio=0.5)  # fmt: skip
    long_key = base64.b64encode(os.urandom(2250)).decode()  # 3,000 characters that do not compress
    long_tombstone = base64.b64encode(os.urandom(2250)).decode()
    sent = [Case(f"k{i}", "ok", json.dumps({"id": f"k{i}", "t": f"v{i}"}).encode()) for i in range(20)]
    sent.insert(7, Case("long", "long key", json.dumps({"id": long_key, "t": "x"}).encode()))
    sent.insert(12, Case(long_tombstone, "long tombstone key", None))
    offsets = produce_corpus(kafka_config, unique_name, sent)
    plan = plan_run(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    run_spark_stage(spec, plan.run_id)
    result = commit_run(engine, spec, plan.run_id)

    assert (result.records_read, result.dead_letters) == (22, 2)
    rows, dead = snapshot(engine, spec)
    assert {r["id"]: r["t"] for r in rows} == {f"k{i}": f"v{i}" for i in range(20)}
    assert {d["offset"] for d in dead} == {offsets["long"], offsets[long_tombstone]}
    assert all("btree index row limit is 2704 bytes" in d["error"] and "3000 bytes" in d["error"] for d in dead), dead
