"""Coverage queries and ``cli status`` on real Postgres, against values derived from the seed's own
parameters (not read back from the code under test); a spec that never ran against its topic on Kafka."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from bench.coverage import seed
from reprocess.core.errors import StageRefusedError
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_admin
from reprocess.operations import coverage
from tests.support.helpers import log_ends, orders_spec
from tests.support.staging import T0, Record, stage_and_commit

pytestmark = pytest.mark.integration("postgres")


def test_panels_and_status_show_gap_lag_verdicts_and_dead_letters(engine, unique_name):
    s = seed(engine, unique_name, partitions=4, runs=900, step=10, dead_letters=30, days=3, retained_runs=100)
    n, step = s.runs, s.step
    with engine.connect() as conn:
        (p,) = coverage.overview(conn, [s.pipeline])
        runs = coverage.runs(conn, s.pipeline)
        last_page = coverage.runs(conn, s.pipeline, offset=n - 10)
        cells = coverage.calendar(conn, s.pipeline)
        dead = coverage.dead_letters(conn, s.pipeline, limit=100)
        utf8 = coverage.dead_letters(conn, s.pipeline, kind="value is not valid UTF-8", limit=100)
        kinds = dict(coverage.dead_letter_kinds(conn, s.pipeline))

    # Partitions: log [ (n+1)*step - retained, (n+1)*step ), ledger n*step, so the lag is one step.
    assert [(x.topic, x.partition) for x in p.partitions] == [(s.topic, i) for i in range(s.partitions)]
    for x in p.partitions:
        assert (x.log_start, x.ledger, x.log_end, x.lag) == (
            (n + 1) * step - 100 * step,
            n * step,
            (n + 1) * step,
            step,
        )
        assert x.ledger_run == f"reprocess_{s.pipeline}_incremental/scheduled__{n - 1}"
        expected = [(0, n * step)]
        if x.partition == s.gap_partition:  # the run that never committed there leaves a hole
            expected = [(0, s.gap_run * step), ((s.gap_run + 1) * step, n * step)]
        assert list(x.islands) == expected
        assert x.unread_since is not None and x.risk == "ok"
    assert p.lag == step * s.partitions and p.dead_letters_day == 30
    assert p.last_run == f"reprocess_{s.pipeline}_incremental/scheduled__{n - 1}"

    # Runs: newest first, 50 a page, the last page holds the oldest; ranges per run.
    assert [r.run_id.rsplit("__", 1)[1] for r in runs.items] == [str(i) for i in range(n, n - 50, -1)]
    assert runs.has_next and not last_page.has_next and last_page.items[-1].run_id.endswith("__0")
    assert runs.items[1].range_text() == f"{s.partitions} partitions, {s.partitions * step:,} offsets"
    assert runs.items[0].state == "planned" and runs.items[1].state == "committed"

    # Calendar: days × partitions cells, one gap; its conf replays the gap's uncovered offsets.
    assert len(cells) == s.days * s.partitions
    gaps = [c for c in cells if c.verdict == "gap"]
    assert [(g.partition, g.heal_conf is not None) for g in gaps] == [(s.gap_partition, True)]
    assert all(c.heal_conf is None for c in cells if c.verdict == "ok")

    # Dead letters: three kinds, newest first, a kind filter, raw bytes previewed safely.
    assert kinds == {"malformed JSON or not a JSON object": 10, "value is not valid UTF-8": 10,
                     "missing required field amount": 10}  # fmt: skip
    assert len(dead.items) == 30 and not dead.has_next
    assert [d.created_at for d in dead.items] == sorted((d.created_at for d in dead.items), reverse=True)
    assert {d.value for d in utf8.items} == {b"\xff\xfe"} and utf8.items[0].value_preview == "\\xff\\xfe"

    env = {**os.environ}
    out = subprocess.run(["reprocess", "status", s.pipeline], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    lines = out.splitlines()
    assert lines[0].startswith(f"PIPELINE {s.pipeline} ")
    assert lines[1].split() == ["TOPIC", "PARTITION", "LOG-START", "LEDGER", "LOG-END", "LAG", "LAST-RUN", "RECONCILED"]
    first = lines[2].split()
    assert first[:7] == [s.topic, "0", str((n + 1 - 100) * step), str(n * step), str((n + 1) * step), str(step),
                         f"reprocess_{s.pipeline}_incremental/scheduled__{n - 1}"]  # fmt: skip
    as_json = json.loads(
        subprocess.run(
            ["reprocess", "status", s.pipeline, "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert as_json[0]["lag"] == step * s.partitions
    assert [x["lag"] for x in as_json[0]["partitions"]] == [step] * s.partitions
    missing = subprocess.run(["reprocess", "status", "no_such_pipeline"], env=env,
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 1 and "no pipeline named 'no_such_pipeline'" in missing.stderr


def test_covered_ranges_follow_inserts_deletes_and_updates(engine, unique_name):
    """The islands are the union of committed ranges whatever the order they arrive in."""
    rows = [(0, 10), (20, 30), (10, 20), (35, 40), (5, 8), (50, 50)]
    params = {"pipeline": unique_name, "topic": "t"}
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO reprocess.pipelines (name, target_table, spec) VALUES (:pipeline, 'x.y', "
                          "'{\"topics\": [\"t\"]}')"), params)  # fmt: skip
        for i, (a, b) in enumerate(rows):
            conn.execute(text("INSERT INTO reprocess.runs (run_id, pipeline, kind, state) VALUES (:r, :pipeline, "
                              "'backfill', 'committed')"), {**params, "r": f"{unique_name}/{i}"})  # fmt: skip
            conn.execute(
                text("INSERT INTO reprocess.committed_ranges (pipeline, run_id, topic, partition, start_offset, "
                     "end_offset) VALUES (:pipeline, :r, :topic, 0, :a, :b)"),
                {**params, "r": f"{unique_name}/{i}", "a": a, "b": b},
            )  # fmt: skip

    def islands() -> list[tuple[int, int]]:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                "SELECT start_offset, end_offset FROM reprocess.covered_ranges WHERE pipeline = :pipeline "
                "ORDER BY start_offset"), params)]  # fmt: skip

    assert islands() == [(0, 30), (35, 40)]
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM reprocess.committed_ranges WHERE pipeline = :pipeline AND start_offset = 10"),
                     params)  # fmt: skip
    assert islands() == [(0, 10), (20, 30), (35, 40)]
    with engine.begin() as conn:
        conn.execute(text("UPDATE reprocess.committed_ranges SET end_offset = 36 WHERE pipeline = :pipeline "
                          "AND start_offset = 20"), params)  # fmt: skip
    assert islands() == [(0, 10), (20, 40)]


@pytest.mark.integration("kafka")
def test_status_lists_a_spec_that_never_ran_with_the_dag_that_starts_it_and_its_backlog(
    engine, kafka_config, unique_name
):
    """A spec with no run: ``status`` lists it (alone and among all), exit 0, naming its backfill DAG;
    ``--live`` adds each partition's backlog, the producer's own log ends (the topic starts at 0)."""
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(40, 2, seed=37), malformed=())
    ends = log_ends(produced)

    def status(*args: str, code: int | None = 0) -> str:
        out = subprocess.run(["reprocess", "status", *args], capture_output=True, text=True)
        assert code is None or out.returncode == code, out.stderr[-2000:]
        return out.stdout

    dag = f"reprocess_{unique_name}_backfill"
    lines = status(spec.name).splitlines()
    assert lines[0] == (f"PIPELINE {spec.name} (target {spec.qualified_target}; never ran: "
                        f"`airflow dags trigger {dag}` starts it)")  # fmt: skip
    assert len(lines) == 2 and unique_name in lines[1]

    live = status(spec.name, "--live").splitlines()
    assert live[0] == lines[0]
    assert live[1].split() == ["TOPIC", "PARTITION", "LOG-START", "LOG-END", "BACKLOG"]
    rows = [row.split() for row in live[2:4]]
    assert rows == [[unique_name, str(p), "0", str(ends[p]), str(ends[p])] for p in (0, 1)]
    assert live[4] == f"BACKLOG {sum(ends.values())} records on the broker now"

    [as_json] = json.loads(status(spec.name, "--live", "--json"))
    assert (as_json["never_ran"], as_json["start_dag"], as_json["backlog"]) == (True, dag, sum(ends.values()))
    assert {p["partition"]: p["backlog"] for p in as_json["partitions"]} == ends

    listed = {p["name"]: p for p in json.loads(status("--json", code=None))}  # 1 when another test's run failed
    assert listed[spec.name]["never_ran"] and listed[spec.name]["partitions"] is None
    assert all(not p["never_ran"] for name, p in listed.items() if name != spec.name)

    # A topic not created yet is said so, and asking does not create it (the broker auto-creates a topic asked by name).
    waiting = orders_spec(f"{unique_name}_w", f"{unique_name}_w")
    [no_topic] = json.loads(status(waiting.name, "--live", "--json"))
    assert no_topic["broker_error"] == f"not on the broker yet: {unique_name}_w" and no_topic["partitions"] == []
    assert f"{unique_name}_w" not in make_admin(kafka_config).list_topics(timeout=10).topics


def test_status_lists_the_healthy_specs_and_reports_a_broken_one_as_a_finding(engine, unique_name):
    """One spec file that does not load hides none of the others: ``status`` lists the healthy spec
    that never ran and reports the broken file with its error and fix (exit 1), in text and JSON;
    asked for the healthy pipeline alone, it answers as before (exit 0)."""
    spec = orders_spec(unique_name, unique_name)
    folder = Path(os.environ["REPROCESS_PIPELINES_DIR"])
    typo = folder / f"{unique_name}_typo.yaml"
    typo.write_text(f"name: {unique_name}_typo\ntopics: [t]\nkey: [id]\ncolumns:\n  id: {{type: money}}\n")

    def status(*args: str, code: int) -> str:
        out = subprocess.run(["reprocess", "status", *args], capture_output=True, text=True)
        assert out.returncode == code, out.stdout[-2000:] + out.stderr[-2000:]
        return out.stdout

    text = status(code=1)  # (a failed run of another test's pipeline exits 1 as well)
    assert f"PIPELINE {spec.name} (target {spec.qualified_target}; never ran:" in text, text
    assert f"BROKEN SPEC {typo}: its pipeline is not listed until the file loads" in text, text
    assert "field 'columns.id.type': 'money' is not one of" in text and f"`reprocess validate {typo}`" in text, text

    listed = {p["name"]: p for p in json.loads(status("--json", code=1))}
    assert listed[spec.name]["never_ran"], listed
    broken = listed[typo.stem]
    assert broken["broken_spec"] and broken["spec_file"] == str(typo) and "money" in broken["error"], broken

    [alone] = json.loads(status(spec.name, "--json", code=0))
    assert alone["name"] == spec.name and alone["never_ran"]
    assert "BROKEN SPEC" in status(typo.stem, code=1)


def test_status_shows_a_failed_newest_run_with_its_cause_apart_from_the_ledger_run_and_exits_1(
    engine, db_url, unique_name
):
    """The newest run failed (its commit refused for its dead letters): ``status`` shows it with its state and
    cause beside the run that last moved the ledger, and exits 1 (text and JSON); a run that commits after it
    ends both."""
    spec = orders_spec(unique_name, unique_name, max_dead_letter_ratio=0.05)

    def order(offset: int) -> Record:
        values = {"order_id": f"o{offset}", "customer_id": "c", "status": "new", "updated_at": T0}
        return Record(0, offset, values)

    def status(*args: str, code: int) -> str:
        out = subprocess.run(["reprocess", "status", spec.name, *args], capture_output=True, text=True)
        assert out.returncode == code, out.stdout[-2000:] + out.stderr[-2000:]
        return out.stdout

    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [order(0), order(1)])
    refused = f"{unique_name}-2"
    with pytest.raises(StageRefusedError):
        stage_and_commit(engine, db_url, spec, refused, [order(2), Record(0, 3, None), Record(0, 4, None)])

    text = status(code=1)
    latest = next(line for line in text.splitlines() if "LATEST RUN" in line)
    assert refused in latest and " failed: " in latest and "max_dead_letter_ratio" in latest, text
    assert f"{unique_name}-1" in text  # the ledger's run, on its partition's row
    [as_json] = json.loads(status("--json", code=1))
    assert (as_json["latest_run"], as_json["latest_state"], as_json["last_run"]) == (
        refused,
        "failed",
        f"{unique_name}-1",
    )

    stage_and_commit(engine, db_url, spec, f"{unique_name}-3", [order(5)])
    assert "LATEST RUN" not in status(code=0)
