"""``reprocess validate`` on real services: a broken spec offline, then a spec whose topic holds
records the job would dead-letter and whose table the spec cannot alter in place; the backfill's
dry run reports the same findings.

The expected counts come from what the test produced (the oracle is the test's own list), not
from the product's decoder.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from sqlalchemy import text

from reprocess.kafka import demo_data
from tests.support.helpers import orders_spec, run_dag

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

FNS = "tests.support.transform_fns"
INVOICES = Path(__file__).resolve().parents[3] / "pipelines" / "examples" / "invoices.yaml"
BROKEN = {
    "name": "Orders-2",
    "topics": ["orders"],
    "key": ["order_id"],
    "columns": {
        "order_id": {"type": "text", "required": True},
        "amount": {"type": "money"},
        "updated_at": {"type": "timestamptz", "pth": "updated"},
    },
    "batchsize": 10,
}


def _validate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    merged = {**os.environ, **(env or {})}
    return subprocess.run(["reprocess", "validate", *args], capture_output=True, text=True, timeout=300, env=merged)


def test_broken_spec_prints_every_problem_with_its_fix_and_exits_1(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(BROKEN))

    out = _validate("--offline", str(path))

    print(out.stdout)
    assert out.returncode == 1, out.stdout + out.stderr
    findings = out.stdout.split("\nERROR   ")
    assert len(findings) == 4, out.stdout
    assert "'batchsize' was unexpected" in out.stdout and "did you mean 'batch_size'?" in out.stdout
    assert "columns.amount.type: 'money' is not one of" in out.stdout and "use one of 'text'," in out.stdout
    assert "('pth' was unexpected)" in out.stdout and "did you mean 'path'?" in out.stdout
    assert "name: 'Orders-2' does not match" in out.stdout
    assert out.stdout.count("\n    fix: ") == 4
    # A rule the schema cannot say: the ordering column must be one of the columns.
    rule = tmp_path / "rule.yaml"
    ordered_by_unknown = {"mode": "column", "column": "v"}
    rule.write_text(yaml.safe_dump({"name": "o", "topics": ["orders"], "key": ["order_id"],
                                    "columns": {"order_id": "text"}, "ordering": ordered_by_unknown}))  # fmt: skip
    ruled = json.loads(_validate("--offline", "--json", str(rule)).stdout)
    assert [(f["check"], f["severity"]) for f in ruled["findings"]] == [("spec", "error")]
    assert "'v'" in ruled["findings"][0]["problem"]


def test_a_debezium_spec_ordered_by_the_wal_position_is_warned_with_the_fix(tmp_path):
    path = tmp_path / "cdc.yaml"
    path.write_text(yaml.safe_dump({
        "name": "cdc", "format": "debezium", "topics": ["t"], "key": ["id"],
        "ordering": {"mode": "column", "column": "lsn"},
        "columns": {"id": "integer", "lsn": {"type": "bigint", "path": "$source.lsn", "required": True}},
    }))  # fmt: skip

    out = _validate("--offline", "--json", str(path))

    assert out.returncode == 0, out.stdout + out.stderr  # a warning fails nothing
    findings = json.loads(out.stdout)["findings"]
    assert [(f["check"], f["severity"]) for f in findings] == [("ordering", "warning")]
    assert "not of its commit" in findings[0]["problem"] and "`ordering: offset`" in findings[0]["fix"]
    assert "1 warning(s)" in _validate("--offline", str(path)).stdout


def test_online_findings_topic_sample_and_table_and_the_dry_run_shows_them(kafka_config, engine, unique_name):
    topic = unique_name
    spec = orders_spec(unique_name, topic)
    demo_data.create_topic(kafka_config, topic, 2)
    events = demo_data.order_events(30, 1)
    bad_amount = {key for key, _ in events[:6]}
    events = [(k, {**e, "amount": "lots"} if k in bad_amount else e) for k, e in events]
    produced = demo_data.produce(kafka_config, topic, 2, events, malformed=(b"not json", b"<xml/>", b"{oops"))
    # The oracle: what each produced message is, from the test's own bookkeeping.
    values = [json.loads(v) if v.startswith(b'{"') else None for _, _, _, v in produced.messages]
    expected_malformed = sum(v is None for v in values)
    expected_type_errors = sum(1 for v in values if v is not None and v.get("amount") == "lots")
    assert (expected_malformed, expected_type_errors) == (3, 6)
    with engine.begin() as conn:  # a table the spec cannot alter in place: amount is text, not numeric
        conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{unique_name}"'))
        conn.execute(text(f'CREATE TABLE "{unique_name}".orders (order_id text PRIMARY KEY, amount text)'))
    missing_topic = orders_spec(f"{unique_name}_m", f"{topic}_missing")

    out = _validate("--json", "--sample", "1000", spec.source_file, missing_topic.source_file)

    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads(out.stdout)
    mine = [f for f in report["findings"] if f["source"] == spec.source_file]
    by_check: dict[str, list[dict[str, Any]]] = {}
    for f in mine:
        by_check.setdefault(f["check"], []).append(f)
    print(json.dumps(by_check, indent=1))
    assert [f["problem"] for f in by_check["topic"]] == [f"topic {topic!r}: 2 partitions"]
    sample = {f["problem"].split(": ", 1)[1].split(" (e.g.")[0]: f for f in by_check["sample"][1:]}
    total = len(produced.messages)
    assert by_check["sample"][0]["problem"] == (
        f"{total} newest records decoded: {total - expected_malformed - expected_type_errors} rows, "
        f"{expected_malformed + expected_type_errors} dead letters"
    )
    assert sample["malformed JSON or not a JSON object"]["problem"].startswith(f"{expected_malformed} of {total} ")
    assert sample["type error"]["problem"].startswith(f"{expected_type_errors} of {total} ")
    assert "field amount is not numeric: lots" in sample["type error"]["problem"]
    assert all(f["severity"] == "error" for f in sample.values())  # 9 of 35 > max_dead_letter_ratio 5%
    (table,) = by_check["table"]
    assert table["severity"] == "error"
    assert "column amount: type text → numeric" in table["problem"] and "mode=rebuild" in table["fix"]
    gone = [f for f in report["findings"] if f["source"] == missing_topic.source_file]
    assert (gone[0]["check"], gone[0]["severity"]) == ("topic", "error")
    assert f"kafka-topics.sh --create --topic {topic}_missing" in gone[0]["fix"]

    # The backfill form's dry run: the same problems in the run's summary (and note). The table is
    # made compatible first: planning refuses one the spec cannot alter in place (after logging why).
    with engine.begin() as conn:
        conn.execute(text(f'ALTER TABLE "{unique_name}".orders ALTER COLUMN amount TYPE numeric USING NULL'))
    dr = run_dag(spec, "backfill", {"dry_run": True})
    assert dr.state == "success"
    with engine.connect() as conn:
        summary = conn.execute(
            text("SELECT summary FROM reprocess.runs WHERE pipeline = :p ORDER BY created_at DESC LIMIT 1"),
            {"p": spec.name},
        ).scalar_one()
    dry = [w for w in summary["warnings"] if w.startswith("validate: ")]
    problems = [f for f in mine if f["severity"] != "ok" and f["check"] != "table"]
    assert len(dry) == len(problems), dry
    for finding in problems:
        assert any(finding["problem"] in w and finding["fix"] in w for w in dry), finding["problem"]


def test_a_typod_path_and_an_always_null_column_are_warned_and_the_dry_run_shows_them(
    kafka_config, engine, unique_name
):
    topic = unique_name
    demo_data.create_topic(kafka_config, topic, 1)
    reading = {"temp_c": 21.5, "humidity": None}
    readings = [(f"s{n}", {"sensor_id": f"s{n}", "reading": reading}) for n in range(300)]
    produced = demo_data.produce(kafka_config, topic, 1, readings, malformed=())
    assert len(produced.messages) == 300  # the oracle: every record holds reading.temp_c, none a humidity
    sensor = {"type": "text", "required": True}
    typod = orders_spec(unique_name, topic, key=["sensor_id"], columns={
        "sensor_id": sensor,
        "temp_c": {"type": "real", "path": "reading.tmp_c"},
        "humidity": {"type": "real", "path": "reading.humidity"},
    })  # fmt: skip
    correct = orders_spec(f"{unique_name}_ok", topic, key=["sensor_id"], columns={
        "sensor_id": sensor, "temp_c": {"type": "real", "path": "reading.temp_c"},
    })  # fmt: skip

    out = _validate("--json", "--sample", "1000", typod.source_file, correct.source_file)

    assert out.returncode == 0, out.stdout + out.stderr  # warnings fail nothing
    findings = json.loads(out.stdout)["findings"]
    paths = [(f["source"], f["severity"], f["problem"]) for f in findings if f["check"] == "path"]
    assert paths == [
        (typod.source_file, "warning", "column 'temp_c': `reading.tmp_c` found in 0 of 300 records; "
         "did you mean `reading.temp_c`?"),
        (typod.source_file, "warning", "column 'humidity' (`reading.humidity`) is NULL in all 300 decoded rows"),
    ]  # fmt: skip
    text_out = _validate(typod.source_file).stdout
    assert "WARNING" in text_out and "did you mean `reading.temp_c`?" in text_out and "2 warning(s)" in text_out

    dr = run_dag(typod, "backfill", {"dry_run": True})
    assert dr.state == "success"
    with engine.connect() as conn:
        summary = conn.execute(
            text("SELECT summary FROM reprocess.runs WHERE pipeline = :p ORDER BY created_at DESC LIMIT 1"),
            {"p": typod.name},
        ).scalar_one()
    dry = [w for w in summary["warnings"] if w.startswith("validate: ")]
    assert any("found in 0 of" in w and "did you mean `reading.temp_c`?" in w for w in dry), dry
    assert any("is NULL in all" in w for w in dry), dry


def test_the_sample_runs_the_transform_and_a_kept_tombstone_is_named_with_its_setting(unique_name, kafka_config):
    """Issue 59 item 7: the sample ran the decoder alone, so ``net`` (which the spec's transform
    computes, ``tests.support.transform_fns:v1``) was 'found in 0 of N records'. The sample now
    runs the transform as the Spark job does; where the function cannot be imported it is not run,
    and the columns it may set are not judged (a warning says why; an error when it fails). And a
    tombstone the spec keeps as a dead letter is named so, with the ``tombstones`` setting as its
    fix, and counts in the sample's dead-letter ratio no more than in a run's."""
    topic, tombstones = unique_name, f"{unique_name}_t"
    demo_data.create_topic(kafka_config, topic, 1)
    events = [(f"inv-{n}", {"id": f"inv-{n}", "region": "eu", "status": "test" if n % 5 == 0 else "paid",
                            "amount_cents": 100 + n, "note": None}) for n in range(40)]  # fmt: skip
    demo_data.produce(kafka_config, topic, 1, events, malformed=())
    rows = sum(1 for _, e in events if e["status"] != "test")  # the oracle: `where` drops test traffic
    note = {"type": "text", "path": "note"}
    invoices = yaml.safe_load(INVOICES.read_text())
    ran = orders_spec(unique_name, topic, base=INVOICES, columns={**invoices["columns"], "note": note})
    unimportable = orders_spec(f"{unique_name}_x", topic, base=INVOICES, columns={**invoices["columns"], "note": note},
                               transform="no_such_package.fns:v1")  # fmt: skip
    failing = orders_spec(f"{unique_name}_f", topic, base=INVOICES, transform=f"{FNS}:drops_lineage")
    demo_data.create_topic(kafka_config, tombstones, 1)
    demo_data.produce(kafka_config, tombstones, 1, demo_data.order_events(2, 1), malformed=())
    producer = Producer(kafka_config)
    producer.produce(tombstones, key=b"o-1", value=None)  # 1 of 3 records: 33 % > max_dead_letter_ratio 5 %
    assert producer.flush(30) == 0
    orders = orders_spec(f"{unique_name}_o", tombstones)
    root = str(INVOICES.parents[2])  # tests.support.transform_fns, importable as the Spark task's worker has it

    started = time.monotonic()
    specs = (ran.source_file, unimportable.source_file, failing.source_file, orders.source_file)
    out = _validate("--json", *specs, env={"PYTHONPATH": root})
    print(f"validate: {time.monotonic() - started:.1f} s")

    assert out.returncode == 1, out.stdout + out.stderr
    findings = json.loads(out.stdout)["findings"]
    (failed,) = [f for f in findings if f["severity"] == "error"]  # a run would fail: an error, the others judged
    assert failed["source"] == failing.source_file and failed["check"] == "transform", failed
    assert "failed on the sample" in failed["problem"] and "returned a DataFrame without" in failed["problem"]
    dead = {(f["source"], f["problem"]) for f in findings if f["check"] == "path"}
    assert dead == {(ran.source_file, f"column 'note' (`note`) is NULL in all {rows} decoded rows")}, dead
    (skipped,) = [f for f in findings if f["source"] == unimportable.source_file and f["check"] == "transform"]
    assert skipped["severity"] == "warning" and "no_such_package" in skipped["problem"]
    assert "(amount, label, net, note, region, status)" in skipped["problem"], skipped
    (tombstone,) = [f for f in findings if f["source"] == orders.source_file and "would be dead" in f["problem"]]
    assert tombstone["problem"].startswith("1 of 3 sampled records would be dead letters: tombstone (null value)")
    assert tombstone["severity"] == "warning" and "set `tombstones: delete`" in tombstone["fix"], tombstone
