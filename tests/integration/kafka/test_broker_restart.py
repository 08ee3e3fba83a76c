"""Fault matrix case 8: the broker is killed (SIGKILL) and restarted in the middle of a Spark
read, then in the middle of a commit's mirror step; nothing is lost and nothing doubled.

Each test starts a broker of its own (Apache Kafka, one KRaft node, like the session's) on free
ports with its log in ``tmp_path``, so killing it disturbs no other test. Its log is on disk:
topics, records and the consumer group's offsets survive the crash.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devstack.broker import Broker
from devstack.process import free_port
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import (
    assert_matches_oracle,
    group_offsets,
    ledger,
    log_ends,
    orders_spec,
    run_spark_stage,
    runs,
    stage_count,
    start_spark_stage,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

OUTAGE_S = 12  # longer than the job's planning, so its first fetches meet the dead broker


def _stage0_times(spark_log: str, event: str) -> list[datetime]:
    """When Spark logged ``event`` ("Starting"/"Finished") for stage 0's tasks (whole seconds, UTC)."""
    pattern = rf"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) INFO TaskSetManager: {event} task \S+ in stage 0\.0 "
    stamps = re.findall(pattern, spark_log, re.M)
    return [datetime.strptime(t, "%y/%m/%d %H:%M:%S").replace(tzinfo=UTC) for t in stamps]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Broker]:
    """A second Apache Kafka node that a test can kill (SIGKILL) and start again."""
    broker = Broker(free_port(), tmp_path / "kafka", controller_port=free_port())
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()


def test_broker_killed_and_restarted_during_the_read_then_retried_matches_the_oracle(
    engine, own_broker, unique_name, monkeypatch
):
    """SIGKILL of the broker as the Spark job starts its read; the broker comes back 12 s later.

    The kill is timed on the stage table: the job creates it right before its one Spark action, so
    Spark's Kafka source meets a dead broker, on the driver (the assigned partitions' offsets, as it
    plans the read) or in the executors' fetches, and the broker is back well inside the source's
    60 s poll timeout (``kafkaConsumer.pollTimeoutMs``).
    """
    kafka = own_broker.config
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka, unique_name, 2)
    produced = demo_data.produce(kafka, unique_name, 2, demo_data.order_events(2000, 4, seed=31))
    ends = log_ends(produced)
    plan = snapshot_and_migrate(engine, kafka, spec, RunRequest.from_params({}), unique_name)
    assert {r.partition: r.end for r in plan.ranges} == ends  # the broker's log ends are the produced ones

    monkeypatch.setenv("REPROCESS_SPARK_LOG_LEVEL", "INFO")  # the task lines timed below are Spark's INFO
    job = start_spark_stage(spec, plan.run_id, kafka=kafka)
    deadline = time.monotonic() + 180
    while stage_count(engine, spec, plan.run_id) is None:  # one short transaction per look
        assert job.poll() is None, job.stdout.read()[-4000:]
        assert time.monotonic() < deadline, "the job never created its stage"
        time.sleep(0.02)
    own_broker.kill()
    killed_at = datetime.now(UTC).replace(microsecond=0)
    time.sleep(OUTAGE_S)
    restarted_at = datetime.now(UTC)
    own_broker.start()  # returns once the node serves clients again (seconds after its process starts)
    output, _ = job.communicate(timeout=300)

    (own_broker.log.parent / "spark-submit.log").write_text(output)

    # The read (stage 0) ended only after the broker was back: the source waited the outage out
    # (or the job failed loudly, below).
    started, finished = _stage0_times(output, "Starting"), _stage0_times(output, "Finished")
    assert started and min(started) >= killed_at, (killed_at, started, output[-4000:])
    if finished:
        assert max(finished) >= restarted_at.replace(microsecond=0), (restarted_at, finished, output[-4000:])
    first_attempt = job.returncode
    if first_attempt != 0:  # ... and failed loudly: nothing is staged or committed
        assert runs(engine, spec)[0].state == "planned"
        assert target_rows(engine, spec) == {} and ledger(engine, spec) == {}
        run_spark_stage(spec, plan.run_id, kafka=kafka)  # the retry, against the restarted broker
    commit_stored(engine, spec, plan.run_id)
    assert_matches_oracle(engine, spec, produced, ends)
    assert [r.state for r in runs(engine, spec)] == ["committed"]


def _mirror_task(engine: Any, kafka: dict[str, Any], spec: Any) -> subprocess.Popen[str]:
    """The mirror step in a process of its own, as Airflow runs a task: what the broker's death does
    to its Kafka client stays with that attempt (a failed attempt is retried, like the task)."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from reprocess.formats.specs import read_spec\n"
        "from reprocess.operations.mirror import mirror_group_offsets\n"
        "from reprocess.postgres.db import make_engine\n"
        "url, kafka, spec = sys.argv[1], json.loads(sys.argv[2]), read_spec(Path(sys.argv[3]))\n"
        "print(mirror_group_offsets(make_engine(url), kafka, spec))\n"
    )
    url = engine.url.render_as_string(hide_password=False)
    args = [sys.executable, "-c", code, url, json.dumps(kafka), str(spec.source_file)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_broker_killed_during_the_mirror_step_leaves_the_commit_and_the_next_run_exact(engine, own_broker, unique_name):
    """SIGKILL of the broker right after a run's Postgres commit, as its mirror step starts; the
    broker comes back 12 s later.

    The mirror (the ledger copied to the consumer group) cannot finish while the broker is dead;
    the commit stands all the while. The mirror then completes, or fails and is retried as the
    Airflow task would be, and the group holds the ledger. A run planned after the restart, on
    records produced after it, starts at the ledger: the target equals the oracle of everything
    produced, each offset committed exactly once.
    """
    kafka = own_broker.config
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka, unique_name, 2)
    first = demo_data.produce(kafka, unique_name, 2, demo_data.order_events(300, 3, seed=41))
    plan1 = snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-1")
    run_spark_stage(spec, plan1.run_id, kafka=kafka)
    commit_stored(engine, spec, plan1.run_id)

    own_broker.kill()
    step = _mirror_task(engine, kafka, spec)
    time.sleep(OUTAGE_S)
    assert step.poll() != 0, "the mirror succeeded against a dead broker"  # running, or failed: retried below
    assert ledger(engine, spec) == log_ends(first)  # the Postgres commit stands during the outage
    assert_matches_oracle(engine, spec, first, log_ends(first))
    own_broker.start()
    try:
        output, _ = step.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        step.kill()
        raise AssertionError("the mirror step never returned after the broker came back") from None
    if step.returncode != 0:  # the task failed (OffsetLookupError, or its process died): Airflow retries it
        print(f"mirror task attempt 1 exited {step.returncode}: {output[-2000:]}")
        retry = _mirror_task(engine, kafka, spec)  # the task's retry, a process of its own too
        output, _ = retry.communicate(timeout=120)
        assert retry.returncode == 0, output[-2000:]
    assert group_offsets(kafka, spec.consumer_group, unique_name, 2) == log_ends(first) == ledger(engine, spec)

    later = [
        (k.replace("o-", "l-"), {**ev, "order_id": ev["order_id"].replace("o-", "l-")})
        for k, ev in demo_data.order_events(200, 3, seed=42)
    ]
    second = demo_data.produce(kafka, unique_name, 2, later)
    plan2 = snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-2")
    assert {r.partition: r.start for r in plan2.ranges} == log_ends(first)
    run_spark_stage(spec, plan2.run_id, kafka=kafka)
    commit_stored(engine, spec, plan2.run_id)
    both = demo_data.Produced(sorted(first.messages + second.messages))
    assert_matches_oracle(engine, spec, both, log_ends(both))
    assert [r.state for r in runs(engine, spec)] == ["committed", "committed"]
