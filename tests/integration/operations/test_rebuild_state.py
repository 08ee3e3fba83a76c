"""A rebuild verifies typed keys and deletions, writes only shadow state until its swap, and its
swap carries what hangs off the live table, keeps rows the log no longer holds, and never
commits without swapping.

Real broker, Postgres and Spark (the rebuild's batches run the real Spark job over Connect).
Every expectation is recomputed here from the records the test produced (newest record per key
by offset; a tombstone deletes), with Python's own types; nothing of the product is imported
for it.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.errors import ReprocessError
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.runner.start import commit_stored, snapshot_and_migrate, start_run
from tests.support.helpers import orders_spec, run_spark_stage
from tests.support.sent_topic import Topic

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

REBUILD = {"mode": "rebuild", "batch_size": 4}


def _table(engine, qualified: str, columns: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(f"SELECT {columns} FROM {qualified}")).all()]


def test_typed_keys_and_deleted_keys_verify_and_swap_in(kafka_config, engine, unique_name):
    """numeric, timestamptz and double keys written differently in JSON than Postgres prints
    them (1.5 / 1.500000000, ...Z / +00:00, 5 / 5.0), and keys deleted by tombstones: the shadow
    is right, so the swap must go through, and the new table must equal the oracle."""
    columns = {"n": {"type": "numeric"}, "t": {"type": "timestamptz"}, "d": {"type": "double precision"},
               "s": {"type": "text"}}  # fmt: skip
    spec = orders_spec(unique_name, unique_name, key=["n", "t", "d"], columns=columns, tombstones="delete")
    topic = Topic(kafka_config, unique_name)
    a = {"n": 1.5, "t": "2026-11-01T00:00:00Z", "d": 5}
    b = {"n": 2, "t": "2026-11-01T12:30:00+02:00", "d": 0.25}
    c = {"n": 3.25, "t": "2026-11-02T00:00:00Z", "d": 7}
    for i, key in enumerate([a, b, c, a, c]):
        topic.send(key, {**key, "s": f"v{i}"})
    topic.send(c, None)  # c is deleted
    topic.send(b, {**b, "s": "v6"})

    def typed(key: dict[str, Any]) -> tuple[Decimal, datetime, float]:
        return Decimal(str(key["n"])), datetime.fromisoformat(key["t"].replace("Z", "+00:00")), float(key["d"])

    expected: dict[tuple[Decimal, datetime, float], str | None] = {}
    for key, value in topic.sent:
        expected[typed(key)] = None if value is None else value["s"]
    expected = {k: v for k, v in expected.items() if v is not None}

    live = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-live")
    run_spark_stage(spec, live.run_id)
    commit_stored(engine, spec, live.run_id)
    rebuild, _ = start_run(engine, kafka_config, spec, RunRequest.from_params(REBUILD), f"{unique_name}-rebuild")
    run_spark_stage(spec, rebuild.run_id, batch_size=4)
    commit_stored(engine, spec, rebuild.run_id)

    rows = _table(engine, spec.qualified_target, "n, t, d, s")
    assert {(n.normalize(), t, d): s for n, t, d, s in rows} == {
        (n.normalize(), t, d): s for (n, t, d), s in expected.items()
    }


def _dead_letters(engine, pipeline: str) -> dict[int, str | None]:
    """offset → the run that resolved it (None: open) of the pipeline's dead letters."""
    with engine.connect() as conn:
        rows = conn.execute(
            text('SELECT "offset", resolved_run_id FROM reprocess.dead_letters WHERE pipeline = :p'), {"p": pipeline}
        ).all()
    return dict(rows)


def test_a_rebuild_writes_only_shadow_state_until_its_swap_which_carries_what_hangs_off_the_table(
    kafka_config, engine, unique_name
):
    """``tombstones: delete``, key ``id`` text → bigint, ``s`` no longer required. The live pipeline
    lags (it read [0, 4)): key 1 is deleted there (marker @2), the record @3 lacks ``s`` (a dead
    letter under v1, a row under v2), and key 1 comes back @4. The rebuild's batches must leave
    the live markers and dead letters alone (the live markers have the old key type); the swap
    must refuse while a view reads the live table, then carry over grants, indexes and
    publications, and land the oracle's rows, markers and dead letters."""
    columns = {"id": {"type": "text"}, "s": {"type": "text", "required": True}}
    v1 = orders_spec(
        unique_name, unique_name, key=["id"], columns=columns, tombstones="delete", max_dead_letter_ratio=0.5
    )
    topic = Topic(kafka_config, unique_name)
    topic.send("1", {"id": "1", "s": "a"})  # 0
    topic.send("2", {"id": "2", "s": "b"})  # 1
    topic.send("1", None)  # 2: deletes 1
    topic.send("3", {"id": "3"})  # 3: no s
    end = {unique_name: {"0": 4}}
    live = snapshot_and_migrate(engine, kafka_config, v1, RunRequest.from_params({"end_mode": "offsets",
                    "end_value": json.dumps(end)}), f"{unique_name}-live")  # fmt: skip
    run_spark_stage(v1, live.run_id)
    commit_stored(engine, v1, live.run_id)
    topic.send("1", {"id": "1", "s": "a2"})  # 4: 1 comes back, not read by the live pipeline yet
    markers = f'reprocess_deleted."{v1.name}"'
    live_state = (_table(engine, v1.qualified_target, "id, s"), _table(engine, markers, "id, _kafka_offset"))
    assert live_state == ([("2", "b")], [("1", 2)])
    assert _dead_letters(engine, v1.name) == {3: None}

    reader = f"r_{unique_name}"[:60]
    with engine.begin() as conn:
        conn.execute(text(f"CREATE ROLE {reader}"))
        conn.execute(text(f"GRANT USAGE ON SCHEMA {v1.target_schema} TO {reader}"))
        conn.execute(text(f"GRANT SELECT ON {v1.qualified_target} TO {reader}"))
        conn.execute(text(f"CREATE INDEX by_s ON {v1.qualified_target} (s)"))
        conn.execute(text(f"CREATE PUBLICATION p_{unique_name} FOR TABLE {v1.qualified_target}"))
        conn.execute(text(f"CREATE VIEW {v1.target_schema}.recent AS SELECT id, s FROM {v1.qualified_target}"))

    v2 = orders_spec(unique_name, unique_name, key=["id"], tombstones="delete", max_dead_letter_ratio=0.5,
                     columns={"id": {"type": "bigint"}, "s": {"type": "text"}})  # fmt: skip
    rebuild, _ = start_run(engine, kafka_config, v2, RunRequest.from_params(REBUILD), f"{unique_name}-rebuild")
    run_spark_stage(v2, rebuild.run_id, batch_size=2)
    # Batches committed: the live pipeline's table, markers and dead letters are as they were.
    assert (_table(engine, v1.qualified_target, "id, s"), _table(engine, markers, "id, _kafka_offset")) == live_state
    assert _dead_letters(engine, v1.name) == {3: None}

    with pytest.raises(ReprocessError, match=rf"view {v1.target_schema}\.recent\b.*Nothing was swapped"):
        commit_stored(engine, v2, rebuild.run_id)
    assert _table(engine, v1.qualified_target, "id, s") == [("2", "b")]
    with engine.begin() as conn:
        conn.execute(text(f"DROP VIEW {v1.target_schema}.recent"))
    commit_stored(engine, v2, rebuild.run_id)

    # The oracle, by offset: 1 → a2 @4 (its tombstone @2 is older), 2 → b @1, 3 → no s @3.
    assert sorted(_table(engine, v2.qualified_target, "id, s, _kafka_offset")) == [(1, "a2", 4), (2, "b", 1),
                                                                                  (3, None, 3)]  # fmt: skip
    assert _table(engine, markers, "id, _kafka_offset") == []  # 1's row is newer than its tombstone
    with engine.connect() as conn:  # the live markers were kept beside the old table, never dropped
        (old_markers,) = conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = 'reprocess_deleted' AND tablename LIKE :t"),
            {"t": f"{v1.name[:43]}\\_\\_old\\_%"},
        ).scalars()  # fmt: skip
    assert _table(engine, f'reprocess_deleted."{old_markers}"', "id, _kafka_offset") == [("1", 2)]
    assert _dead_letters(engine, v2.name) == {3: rebuild.run_id}  # parses now: resolved by the rebuild
    with engine.connect() as conn:
        checks = conn.execute(
            text("SELECT has_table_privilege(:r, :t, 'SELECT'), "
                 "(SELECT indrelid::regclass::text FROM pg_index WHERE indexrelid = to_regclass(:i)), "
                 "(SELECT array_agg(schemaname || '.' || tablename) FROM pg_publication_tables WHERE pubname = :p)"),
            {"r": reader, "t": v2.qualified_target, "i": f"{v2.target_schema}.by_s", "p": f"p_{unique_name}"},
        ).one()  # fmt: skip
    assert tuple(checks) == (True, v2.qualified_target, [v2.qualified_target])
    with engine.begin() as conn:  # roles are the cluster's, not the test database's
        conn.execute(text(f"DROP OWNED BY {reader}"))
        conn.execute(text(f"DROP ROLE {reader}"))


def _runs(engine, spec) -> dict[str, tuple[str, list[Any]]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT run_id, state, lost_ranges FROM reprocess.runs WHERE pipeline = :p AND parent_run_id IS NULL"),
            {"p": spec.name},
        ).all()
    return {r.run_id: (r.state, r.lost_ranges) for r in rows}


def test_the_swap_keeps_rows_the_log_no_longer_holds_unless_their_loss_is_allowed(kafka_config, engine, unique_name):
    """[0, 3) were deleted (the Admin API's delete-records, as retention does) after the live
    pipeline committed k0..k5. A rebuild reads [3, 6): swapping it in would drop k0..k2 with
    nothing recorded, so it is refused with the count; with allow_data_loss the rows go and the
    run records the lost range."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    kafka = kafka_config
    spec = orders_spec(unique_name, unique_name, key=["id"], columns={"id": "text", "s": "text"})
    topic = Topic(kafka, unique_name)
    for i in range(6):
        topic.send(f"k{i}", {"id": f"k{i}", "s": f"v{i}"})
    live = snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-live")
    run_spark_stage(spec, live.run_id, kafka=kafka)
    commit_stored(engine, spec, live.run_id)
    admin = AdminClient(kafka)  # held: a collected client never completes its futures
    deleted = admin.delete_records([TopicPartition(unique_name, 0, 3)], operation_timeout=30)
    assert [f.result().low_watermark for f in deleted.values()] == [3]

    refused, _ = start_run(engine, kafka, spec, RunRequest.from_params(REBUILD), f"{unique_name}-rebuild")
    assert [(r.start, r.end) for r in refused.ranges] == [(3, 6)]
    run_spark_stage(spec, refused.run_id, batch_size=4, kafka=kafka)
    with pytest.raises(ReprocessError, match=r"would drop 3 rows .*\[0\]: 3 rows from offset 0 below the log "
                       r"start 3.*allow_data_loss=true"):  # fmt: skip
        commit_stored(engine, spec, refused.run_id)
    assert sorted(_table(engine, spec.qualified_target, "id, s")) == [(f"k{i}", f"v{i}") for i in range(6)]

    allowed, _ = start_run(engine, kafka, spec, RunRequest.from_params({**REBUILD, "allow_data_loss": True}),
                           f"{unique_name}-allowed")  # fmt: skip
    run_spark_stage(spec, allowed.run_id, batch_size=4, kafka=kafka)
    commit_stored(engine, spec, allowed.run_id)
    assert sorted(_table(engine, spec.qualified_target, "id, s")) == [(f"k{i}", f"v{i}") for i in range(3, 6)]
    assert _runs(engine, spec)[allowed.run_id] == (
        "committed", [{"topic": unique_name, "partition": 0, "start": 0, "end": 3}]
    )  # fmt: skip


def test_a_rebuild_with_nothing_to_read_commits_only_by_its_swap(kafka_config, engine, unique_name):
    """An empty topic: the rebuild's plan is empty. Committing it as a plain empty run (what the
    DAG once did) would mark it committed with the old table still live; its stages end in the
    verified swap, and none of them merges into the live target (the builder alone decides where a
    run writes: issue 55 took the commit's own check of the run's mode away with the question)."""
    from reprocess.core.stages import PrepareShadow, Swap, Verify, build_stages
    from reprocess.core.tasks import Task
    from reprocess.runner.evaluate import RunContext, evaluate

    v1 = orders_spec(unique_name, unique_name, key=["id"], columns={"id": "text", "s": "text"})
    demo_data.create_topic(kafka_config, unique_name, 1)
    start_run(engine, kafka_config, v1, RunRequest.incremental(), f"{unique_name}-live")  # commits the empty plan
    v2 = orders_spec(unique_name, unique_name, key=["id"], columns={"id": "bigint", "s": "text"})
    request = RunRequest.from_params(REBUILD)
    rebuild = snapshot_and_migrate(engine, kafka_config, v2, request, f"{unique_name}-rebuild")
    assert rebuild.is_empty
    stages = build_stages(rebuild, v2, request.mode, 4)
    run = rebuild.run_id
    assert stages == (PrepareShadow(run), Verify(run, task=Task.PLAN), Swap(run, True, task=Task.PLAN))

    context = RunContext(engine, v2)
    evaluate(stages[:1], context)
    assert _runs(engine, v2)[rebuild.run_id][0] != "committed"
    evaluate(stages[1:], context)
    with engine.connect() as conn:
        id_type = conn.execute(
            text("SELECT data_type FROM information_schema.columns WHERE table_schema = :s AND table_name = :t "
                 "AND column_name = 'id'"), {"s": v2.target_schema, "t": v2.target_table}
        ).scalar_one()  # fmt: skip
        live_version = conn.execute(
            text("SELECT spec_version FROM reprocess.pipelines WHERE name = :p"), {"p": v2.name}
        ).scalar_one()
    assert (id_type, live_version, _runs(engine, v2)[rebuild.run_id][0]) == ("bigint", 2, "committed")
