"""The fault matrix (issue 4): break one real part, retry, then compare Postgres with the oracle.

Every test kills or breaks a real component (Spark, a Postgres backend, the Postgres server,
a concurrent run, the broker's topic layout), retries the way an operator or Airflow would,
and ends by comparing Postgres with an oracle computed from the produced messages alone
(``oracle.expected_rows`` / ``invalid_count``): no lost row, no doubled row, dead letters
equal to the invalid messages, ledger equal to the committed ends, committed ranges tiling
each partition exactly once.

The library is driven directly (``snapshot_and_migrate`` → ``spark-submit spark_apps/run_job.py`` →
``commit_stored``), not through Airflow, to keep each case to one or two Spark runs.

Not here, on purpose:
- "the same run committed twice is a no-op" is proven in
  ``test_end_to_end.test_backfill_equals_oracle_and_replay_changes_nothing``;
- the broker killed and restarted during the read or the commit, aborted and open
  transactions, and segments deleted by retention are in ``test_broker_restart.py``,
  ``test_transactions.py`` and ``test_data_loss.py``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import psycopg2
import pytest
from sqlalchemy import text

from devstack import connect, postgres
from reprocess.core.errors import FencedRunError, OrderingError, ReprocessError
from reprocess.core.runs import RunKind, RunRequest
from reprocess.kafka import demo_data
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import STAGE_SCHEMA
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support import oracle
from tests.support.helpers import (
    assert_matches_oracle,
    committed_ranges,
    dead_letter_count,
    ledger,
    log_ends,
    oracle_rows,
    orders_spec,
    run_spark_stage,
    runs,
    stage_count,
    start_spark_stage,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]


def _wait_for(condition: Any, what: str, seconds: float = 180, job: Any = None) -> Any:
    """Poll ``condition`` until it returns something truthy; a job that exits first fails the test."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if job is not None and job.poll() is not None:
            pytest.fail(f"spark-submit exited ({job.returncode}) before {what}:\n{job.stdout.read()[-4000:]}")
        assert time.monotonic() < deadline, f"timed out after {seconds:.0f}s waiting for {what}"
        time.sleep(0.05)


def _pg(db_url: str) -> Any:
    conn = psycopg2.connect(libpq_url(db_url))
    conn.autocommit = True
    return conn


def _query(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _park_copies_after_the_first(pg: Any, table: str, name: str, job: Any = None) -> None:
    """Arm the stage table (as soon as the job creates it) with a statement trigger: the first
    COPY passes and commits, every later COPY parks in pg_sleep. Returns once the stage holds
    the first task's rows and another COPY is in flight: the moment to kill something."""
    seq, func = f"{STAGE_SCHEMA}.{name}_copies", f"{STAGE_SCHEMA}.{name}_park"
    _wait_for(lambda: _query(pg, "SELECT to_regclass(%s)", (table,))[0][0], "the stage table", job=job)
    with pg.cursor() as cur:
        cur.execute(f"CREATE SEQUENCE {seq}")
        cur.execute(
            f"CREATE FUNCTION {func}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF nextval('{seq}') > 1 THEN PERFORM pg_sleep(600); END IF; RETURN NULL; END $$"
        )
        cur.execute(f"CREATE TRIGGER park BEFORE INSERT ON {table} FOR EACH STATEMENT EXECUTE FUNCTION {func}()")

    def write_in_flight() -> bool:
        parked = _query(
            pg, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE 'COPY %%'"
        )[0][0]
        return parked > 0 and _query(pg, f"SELECT count(*) FROM {table}")[0][0] > 0

    _wait_for(write_in_flight, "one committed COPY and one in flight", job=job)


def _end_parked_copies(pg: Any, table: str) -> int:
    """A killed executor's COPY backend sees its socket close and aborts; ours are parked in
    pg_sleep (which does not read the socket), so they are ended the same way. Returns the rows
    the stage kept."""
    _query(
        pg,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE 'COPY %%'",
    )
    return int(_query(pg, f"SELECT count(*) FROM {table}")[0][0])


def _run_states(engine, spec) -> list[str]:
    return sorted(r.state for r in runs(engine, spec))


# --------------------------------------------------------------------------- 1. Spark killed
def test_spark_killed_mid_stage_then_retried_loses_and_doubles_nothing(kafka_config, engine, db_url, unique_name):
    """SIGKILL of the whole spark-submit process group while its write tasks are COPYing.

    To kill at a known point, the test arms the stage table (as soon as the job creates it) with
    a statement trigger: the first COPY passes and commits, every later COPY parks in
    pg_sleep. Once the stage holds the first task's rows and another COPY is in flight, the
    job is killed: a partial stage, exactly what a dead executor leaves behind.
    """
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(
        kafka_config, unique_name, 2, demo_data.order_events(1200, 4, seed=21), transactional_every=500
    )
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    table = f'{STAGE_SCHEMA}."{spec.stage_table(plan.run_id)}"'

    # No adaptive coalescing: four write tasks, so some can commit while others are in flight.
    job = start_spark_stage(spec, plan.run_id, conf={"spark.sql.adaptive.enabled": "false"})
    pg = _pg(db_url)
    try:
        _park_copies_after_the_first(pg, table, unique_name, job)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        partial = _end_parked_copies(pg, table)
    finally:
        pg.close()

    expected = oracle_rows(produced)
    invalid = oracle.invalid_count(produced)
    assert 0 < partial < len(expected) + invalid  # the kill left a partial stage behind
    (run,) = runs(engine, spec)
    assert run.state == "planned"  # the killed job never marked it staged ...
    with pytest.raises(ReprocessError, match="not staged"):  # ... so the half stage cannot be committed
        commit_stored(engine, spec, plan.run_id)
    assert target_rows(engine, spec) == {} and ledger(engine, spec) == {}

    # The retry drops the partial stage first: one stage row per key plus one per dead letter. It
    # runs on the warm Connect server (the DAG's default launcher): the cleanup is the job's own
    # whichever launcher runs it, and a second cold spark-submit JVM costs ~20 s of CPU.
    run_spark_stage(spec, plan.run_id)
    staged = stage_count(engine, spec, plan.run_id)
    assert staged == len(expected) + invalid
    assert runs(engine, spec)[0].stage_rows == staged
    result = commit_stored(engine, spec, plan.run_id)
    assert result.records_read == len(produced.messages)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    assert _run_states(engine, spec) == ["committed"]


@pytest.mark.serial  # restarts a service every test uses
def test_connect_server_killed_mid_stage_then_restarted_and_retried_loses_and_doubles_nothing(
    kafka_config, engine, db_url, unique_name
):
    """SIGKILL of the Spark Connect server (JVM and Python workers) while the job's tasks COPY.

    The job runs as the DAG's Connect launcher runs it (this process is the client); the kill
    comes at the same known point as above (one COPY committed, another in flight), and the
    server is started again at once, as ``make services`` would. The client's call fails (its
    session and operation died with the server); the run is not staged, so nothing can be
    committed; the retry on the restarted server drops the partial stage and matches the oracle.
    """
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(
        kafka_config, unique_name, 2, demo_data.order_events(1200, 4, seed=22), transactional_every=500
    )
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    table = f'{STAGE_SCHEMA}."{spec.stage_table(plan.run_id)}"'

    failure: list[BaseException] = []

    def first_attempt() -> None:
        try:
            run_spark_stage(spec, plan.run_id, conf={"spark.sql.adaptive.enabled": "false"})
        except BaseException as exc:  # the test inspects it below
            failure.append(exc)

    client = threading.Thread(target=first_attempt, daemon=True)
    client.start()
    pg = _pg(db_url)
    try:
        _park_copies_after_the_first(pg, table, unique_name)
        connect.kill()
        partial = _end_parked_copies(pg, table)
    finally:
        pg.close()
        connect.start()
    client.join(timeout=300)
    assert not client.is_alive(), "the client did not give up after the server died"
    assert failure, "the first attempt succeeded although its server was killed"

    assert 0 < partial < len(oracle_rows(produced)) + oracle.invalid_count(produced)
    assert [r.state for r in runs(engine, spec)] == ["planned"]
    with pytest.raises(ReprocessError, match="not staged"):
        commit_stored(engine, spec, plan.run_id)
    assert target_rows(engine, spec) == {} and ledger(engine, spec) == {}

    run_spark_stage(spec, plan.run_id)  # the retry, on the restarted server
    commit_stored(engine, spec, plan.run_id)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    assert _run_states(engine, spec) == ["committed"]


# --------------------------------------------------------------------------- 2. commit killed
def test_commit_backend_terminated_mid_transaction_commits_nothing_then_retry_commits_once(
    kafka_config, engine, db_url, unique_name
):
    """pg_terminate_backend() of the committing session after its merge, before its COMMIT.

    The test holds an EXCLUSIVE lock on reprocess.dead_letters, so the commit stops at step 4
    (dead letters: resolve, then insert) while it holds the pipeline's advisory lock and has merged into the target.
    """
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(300, 4, seed=22))
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    run_spark_stage(spec, plan.run_id)

    blocker = psycopg2.connect(libpq_url(db_url))  # one open transaction, holding the lock
    watcher = _pg(db_url)
    outcome: dict[str, Any] = {}

    def commit() -> None:
        try:
            outcome["result"] = commit_stored(engine, spec, plan.run_id)
        except Exception as exc:  # the test inspects whatever the commit raised
            outcome["error"] = exc

    try:
        with blocker.cursor() as cur:
            cur.execute("LOCK TABLE reprocess.dead_letters IN EXCLUSIVE MODE")
        committer = threading.Thread(target=commit)
        committer.start()
        (pid,) = _wait_for(
            lambda: _query(
                watcher,
                # step 4 starts by resolving redriven dead letters (UPDATE), then inserts new ones
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND (query LIKE 'UPDATE reprocess.dead_letters%%' "
                "OR query LIKE 'INSERT INTO reprocess.dead_letters%%')",
            ),
            "the commit to reach its dead-letter step",
            seconds=60,
        )[0]
        held = _query(
            watcher,
            "SELECT locktype, mode, relation::regclass::text FROM pg_locks WHERE pid = %s AND granted",
            (pid,),
        )
        assert ("advisory", "ExclusiveLock", None) in held  # the pipeline lock
        assert ("relation", "RowExclusiveLock", spec.qualified_target) in held  # the merge ran
        _query(watcher, "SELECT pg_terminate_backend(%s)", (pid,))
        committer.join(60)
        assert not committer.is_alive()
    finally:
        blocker.rollback()
        blocker.close()
        watcher.close()

    # The commit failed on the killed session (psycopg2 reports it as the cause of the error raised).
    chain, todo = [], [outcome.get("error")]
    while todo:
        exc = todo.pop()
        if exc is not None and str(exc) not in chain:
            chain.append(str(exc))
            todo += [exc.__cause__, exc.__context__]
    killed = ("terminating connection due to administrator command", "server closed the connection unexpectedly")
    assert any(k in e for k in killed for e in chain), chain
    # Nothing of the killed transaction is visible; the run is still staged and can be retried.
    assert target_rows(engine, spec) == {} and ledger(engine, spec) == {}
    assert dead_letter_count(engine, spec) == 0
    assert _run_states(engine, spec) == ["staged"]

    # The advisory lock died with the session: the retry gets it and commits once.
    result = commit_stored(engine, spec, plan.run_id)
    assert not result.already_committed and result.records_read == len(produced.messages)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    assert _run_states(engine, spec) == ["committed"]
    assert commit_stored(engine, spec, plan.run_id).already_committed


# --------------------------------------------------------------------------- 3. Postgres restart
def _forget_connections(engine: Any) -> None:
    """After a Postgres restart, drop pooled connections: ours and this process's Airflow ones
    (later tests run ``dag.test()`` here against the same server)."""
    from airflow import settings

    engine.dispose()
    if settings.engine is not None:
        settings.Session().invalidate()  # no ROLLBACK on the dead connection, unlike remove()
        settings.Session.remove()
        settings.engine.dispose()


def _staged_run(kafka_config: dict[str, Any], engine: Any, name: str, seed: int) -> tuple[Any, Any, Any, int | None]:
    """A 2-partition topic of order events, planned and staged: (spec, produced, plan, stage rows)."""
    spec = orders_spec(name, name)
    demo_data.create_topic(kafka_config, name, 2)
    produced = demo_data.produce(kafka_config, name, 2, demo_data.order_events(300, 4, seed=seed))
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), name)
    run_spark_stage(spec, plan.run_id)
    return spec, produced, plan, stage_count(engine, spec, plan.run_id)


@pytest.mark.serial  # restarts a service every test uses
def test_postgres_clean_restart_between_stage_and_commit_keeps_the_stage(kafka_config, engine, unique_name):
    """A clean (``-m fast``) stop writes a shutdown checkpoint: the UNLOGGED stage survives and commits."""
    spec, produced, plan, staged = _staged_run(kafka_config, engine, unique_name, seed=23)

    postgres.stop()
    postgres.start()
    _forget_connections(engine)

    assert stage_count(engine, spec, plan.run_id) == staged
    commit_stored(engine, spec, plan.run_id)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    assert _run_states(engine, spec) == ["committed"]


@pytest.mark.serial  # restarts a service every test uses
def test_postgres_crash_restart_empties_the_stage_and_commit_refuses_until_restaged(kafka_config, engine, unique_name):
    """A crash restart resets UNLOGGED tables to empty; committing that as "no data" would lose
    the run's rows and still advance the ledger past them. The commit refuses (the Spark job
    recorded how many rows it staged), and a re-stage + commit recovers.
    """
    spec, produced, plan, staged = _staged_run(kafka_config, engine, unique_name, seed=24)
    assert staged and runs(engine, spec)[0].stage_rows == staged

    postgres.stop(mode="immediate")  # no shutdown checkpoint: the next start runs crash recovery
    postgres.start()
    _forget_connections(engine)

    assert stage_count(engine, spec, plan.run_id) == 0  # the table is there, its rows are not
    with pytest.raises(ReprocessError, match=f"stage holds 0 rows but the Spark job staged {staged}"):
        commit_stored(engine, spec, plan.run_id)
    assert target_rows(engine, spec) == {} and ledger(engine, spec) == {} and dead_letter_count(engine, spec) == 0
    assert _run_states(engine, spec) == ["failed"]  # with the reason; re-staging makes it staged again

    run_spark_stage(spec, plan.run_id)
    commit_stored(engine, spec, plan.run_id)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    assert _run_states(engine, spec) == ["committed"]


# --------------------------------------------------------------------------- 4. racing runs
def test_two_racing_incremental_runs_commit_exactly_once_and_fence_the_other(kafka_config, engine, unique_name):
    """Two incremental runs of one pipeline planned, staged and committed at the same time."""
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(300, 4, seed=25))
    run_ids = [f"{unique_name}-a", f"{unique_name}-b"]

    def together(work: Any) -> list[Any]:
        """Run ``work(run_id)`` for both runs in threads released at once; results or exceptions."""
        gate, out = threading.Barrier(2), [None, None]

        def one(i: int) -> None:
            gate.wait()
            try:
                out[i] = work(run_ids[i])
            except Exception as exc:  # collected and asserted below
                out[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(400)
        return out

    plans = together(lambda rid: snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), rid))
    assert plans[0].ranges == plans[1].ranges and all(r.start == 0 for r in plans[0].ranges), plans
    # The Spark jobs, one through each launcher (a second cold spark-submit JVM would cost ~20 s of
    # CPU): run a through spark-submit, run b meanwhile on the Connect server from this process.
    job = start_spark_stage(spec, run_ids[0])
    run_spark_stage(spec, run_ids[1])
    output, _ = job.communicate(timeout=400)
    assert job.returncode == 0, output[-4000:]
    assert _run_states(engine, spec) == ["staged", "staged"]

    results = together(lambda rid: commit_stored(engine, spec, rid))
    fenced = [r for r in results if isinstance(r, FencedRunError)]
    won = [r for r in results if not isinstance(r, Exception)]
    assert len(fenced) == 1 and len(won) == 1, results
    assert "fenced" in str(fenced[0])
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    assert _run_states(engine, spec) == ["committed", "failed"]
    with engine.connect() as conn:
        committed_by = conn.execute(
            text("SELECT DISTINCT run_id FROM reprocess.committed_ranges WHERE pipeline = :p"), {"p": spec.name}
        ).scalars()
        assert list(committed_by) == [won[0].run_id]


# --------------------------------------------------------------------------- 5. data loss
def test_records_deleted_past_the_ledger_fail_the_read_and_the_plan_unless_allowed_then_are_recorded_as_lost(
    kafka_config, engine, unique_name
):
    """Partition 0's oldest records past the ledger are deleted after a run was planned (the
    Admin API's delete-records, which moves the log start as retention does).

    The planned run's Spark read meets the deletion itself (the broker answers its Fetch with
    OFFSET_OUT_OF_RANGE); the next plan sees the new log start; with allow_data_loss the gap is
    recorded as lost. The deleted records are gone from the broker, so no read can return them.
    """
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from reprocess.core.errors import DataLossError

    kafka = kafka_config
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka, unique_name, 2)
    first = demo_data.produce(kafka, unique_name, 2, demo_data.order_events(150, 3, seed=29), malformed=())
    plan1 = snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-1")
    run_spark_stage(spec, plan1.run_id, kafka=kafka)
    commit_stored(engine, spec, plan1.run_id)
    position = ledger(engine, spec)[0]
    later = [
        (k.replace("o-", "l-"), {**ev, "order_id": ev["order_id"].replace("o-", "l-")})
        for k, ev in demo_data.order_events(150, 3, seed=30)
    ]
    second = demo_data.produce(kafka, unique_name, 2, later, malformed=())
    planned = snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-2")
    deleted_to = position + 40
    assert deleted_to < log_ends(second)[0]
    admin = AdminClient(kafka)  # held: a collected client never completes its futures
    deleted = admin.delete_records([TopicPartition(unique_name, 0, deleted_to)], operation_timeout=30)
    assert [f.result().low_watermark for f in deleted.values()] == [deleted_to]  # after the plan

    # The planned run's read meets the deletion: Spark's Kafka source fails with KAFKA_DATA_LOSS,
    # the job raises the product's DataLossError (no retry), nothing is committed, the ledger stays.
    with pytest.raises(DataLossError) as lost:
        run_spark_stage(spec, planned.run_id, kafka=kafka)
    assert f"{unique_name}[0]: offsets [{position}, {deleted_to}) of the planned range" in str(lost.value)
    assert "allow_data_loss" in str(lost.value)
    assert ledger(engine, spec) == log_ends(first)
    assert target_rows(engine, spec) == oracle_rows(first)

    # Planning now sees the new log start and refuses.
    with pytest.raises(DataLossError) as refused:
        snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-3")
    message = str(refused.value)
    assert f"{unique_name}[0]" in message and f"[{position}, {deleted_to})" in message, message
    assert "allow_data_loss" in message
    assert ledger(engine, spec) == log_ends(first)  # nothing moved

    # With allow_data_loss: the lost range is stored in the run, the read starts at the log start.
    request = RunRequest.from_params({"start_mode": "ledger", "allow_data_loss": True})
    plan4 = snapshot_and_migrate(engine, kafka, spec, request, f"{unique_name}-4")
    assert [(x.topic, x.partition, x.start, x.end) for x in plan4.lost] == [(unique_name, 0, position, deleted_to)]
    assert {r.partition: r.start for r in plan4.ranges}[0] == deleted_to
    run_spark_stage(spec, plan4.run_id, kafka=kafka)
    commit_stored(engine, spec, plan4.run_id)

    # Oracle: everything produced except partition 0's offsets [position, deleted_to).
    survived = demo_data.Produced(
        sorted(first.messages + [m for m in second.messages if not (m[0] == 0 and position <= m[1] < deleted_to)])
    )
    assert target_rows(engine, spec) == oracle_rows(survived)
    assert ledger(engine, spec) == log_ends(second)
    ranges = committed_ranges(engine, spec)
    assert ranges[0] == [(0, position), (deleted_to, log_ends(second)[0])]  # the gap is the lost range, exactly
    assert next(r for r in runs(engine, spec) if r.run_id == plan4.run_id).lost_ranges == [
        {"topic": unique_name, "partition": 0, "start": position, "end": deleted_to}
    ]
    states = {r.run_id: r.state for r in runs(engine, spec)}
    assert states[plan1.run_id] == states[plan4.run_id] == "committed"
    assert states[planned.run_id] != "committed" and states[f"{unique_name}-3"] == "failed"


# --------------------------------------------------------------------------- 6. bad messages
def test_every_kind_of_bad_message_becomes_a_dead_letter_with_raw_bytes_and_a_readable_error(
    kafka_config, engine, unique_name
):
    max_bytes = 2048
    spec = orders_spec(unique_name, unique_name, max_record_bytes=max_bytes)
    oversized = json.dumps(
        {"order_id": "o-oversized", "customer_id": "c1", "status": "paid", "amount": "1.00",
         "updated_at": "2026-11-01T00:00:00Z", "note": "x" * 3000}
    ).encode()  # fmt: skip
    assert oracle.is_valid_order(oversized) is not None and len(oversized) > max_bytes
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(
        kafka_config, unique_name, 2, demo_data.order_events(200, 3, seed=26),
        malformed=(*demo_data.MALFORMED, oversized),
    )  # fmt: skip
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    run_spark_stage(spec, plan.run_id)
    commit_stored(engine, spec, plan.run_id)

    # The oracle's validation knows nothing of max_record_bytes: drop the oversized message from it.
    within_limit = demo_data.Produced([m for m in produced.messages if len(m[3]) <= max_bytes])
    invalid = oracle.invalid_count(produced) + 1
    assert_matches_oracle(engine, spec, within_limit, log_ends(produced), invalid=invalid)

    with engine.connect() as conn:
        dead = conn.execute(
            text('SELECT partition, "offset", key, value, error FROM reprocess.dead_letters WHERE pipeline = :p'),
            {"p": spec.name},
        ).all()
    sent = {(p, o): (k, v) for p, o, k, v in produced.messages}
    for partition, offset, key, value, _ in dead:  # the raw bytes, exactly as produced
        assert (bytes(key), bytes(value) if value is not None else b"") == sent[(partition, offset)]
    errors = {bytes(value) if value is not None else b"": error for *_, value, error in dead}
    expected_error = {
        b"{not json": "malformed JSON",
        demo_data.MALFORMED[1]: "type error: field amount is not numeric",
        demo_data.MALFORMED[2]: "missing required field order_id",
        b"\xff\xfe\xfa not utf-8": "not valid UTF-8",
        b"": "empty value",
        b"[1, 2, 3]": "malformed JSON",
        oversized: f"oversized value: {len(oversized)} bytes > max_record_bytes {max_bytes}",
    }
    assert set(errors) == set(expected_error)
    for value, fragment in expected_error.items():
        assert fragment in errors[value], (value[:40], errors[value])


# --------------------------------------------------------------------------- 7. partitions added
def test_partitions_added_fail_an_offset_ordered_plan_and_an_acknowledged_column_ordered_run_reads_the_new_partition(
    kafka_config, engine, unique_name
):
    """The topic grows from 2 to 3 partitions (the Admin API's create-partitions) between two
    incremental runs: old partitions unchanged, a new empty partition 2.

    Keys may have moved partition, so the offset-ordered pipeline's next plan fails (nothing
    planned, the run recorded as failed with the reason); once the spec orders by a required
    column, a backfill that acknowledges the change reads on from the ledger, partition 2 from
    its log start.
    """
    from confluent_kafka.admin import NewPartitions

    from reprocess.kafka.clients import make_admin

    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    first = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(150, 3, seed=27), malformed=())
    plan1 = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    assert plan1.warnings == ()
    run_spark_stage(spec, plan1.run_id)
    commit_stored(engine, spec, plan1.run_id)
    assert_matches_oracle(engine, spec, first, log_ends(first))

    admin = make_admin(kafka_config)
    for fut in admin.create_partitions([NewPartitions(unique_name, 3)], request_timeout=15).values():
        fut.result()
    new_keys = [
        (k.replace("o-", "n-"), {**ev, "order_id": ev["order_id"].replace("o-", "n-")})
        for k, ev in demo_data.order_events(150, 3, seed=28)
    ]
    second = demo_data.produce(kafka_config, unique_name, 3, new_keys)
    assert any(p == 2 for p, *_ in second.messages)

    with pytest.raises(OrderingError, match=r"has 3 partitions, 2 at the last committed run.*orders by Kafka offset"):
        snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-2")
    assert _run_states(engine, spec) == ["committed", "failed"]

    spec = orders_spec(unique_name, unique_name, ordering={"mode": "column", "column": "updated_at"})
    with pytest.raises(OrderingError, match="acknowledge_partition_change=true"):
        snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-3")
    acknowledged = RunRequest.from_params(
        {"start_mode": "ledger", "acknowledge_partition_change": True}, RunKind.BACKFILL
    )
    plan2 = snapshot_and_migrate(engine, kafka_config, spec, acknowledged, f"{unique_name}-4")
    assert any("has 3 partitions, 2 at the last committed run (acknowledged)" in w for w in plan2.warnings)
    starts = {r.partition: r.start for r in plan2.ranges}
    assert starts == {**{r.partition: r.end for r in plan1.ranges}, 2: 0}  # partition 2 from its log start
    run_spark_stage(spec, plan2.run_id)
    commit_stored(engine, spec, plan2.run_id)

    both = demo_data.Produced(sorted(first.messages + second.messages))
    assert_matches_oracle(engine, spec, both, log_ends(both))
    assert _run_states(engine, spec) == ["committed", "committed", "failed", "failed"]
    # The acknowledged run recorded the new count: the next incremental plans without a decision.
    assert snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-5").warnings == ()
