"""A Debezium pipeline against its oracle, the source table itself (issue 36, item 5).

One PostgreSQL table with a composite key, a large ``text`` and a large ``jsonb`` value stored out
of line (``STORAGE EXTERNAL``, more than 2 kB), ``numeric(20,6)``, ``timestamptz``, ``boolean``,
unicode and NULLs (:data:`bench.cdc_source.LIFE_COLUMNS`) lives a scripted life while a real Debezium
connector streams it: updates that leave the large values unchanged (Debezium's placeholder),
primary-key changes of such rows inside one run and across runs, a re-key onto a deleted key,
update → delete → re-insert, a 50-row transaction, a transaction open across a re-snapshot, a worker
SIGKILLed mid-stream. Runs: a backfill, incrementals, an older slice replayed, a whole-range replay,
and two fresh pipelines loading the whole topic (in one run, and in small batches).

After every run the target must equal the source table value for value, read with psycopg2
(:mod:`bench.cdc_source`, which imports nothing of the product); a failure lists every wrong value
(key, column, source, target) of every stage, then fails. Under REPLICA IDENTITY FULL the same life
(less the worker kill) must be exact too. A rebuild after the full values left the topic
(delete-records, compaction) must keep every value. The DEFAULT life runs on a 2- and a
3-partition topic too, two connectors streaming the same table at once: a key change's delete and
create then sit on different partitions, cut apart by batches (review V, finding 2).

The open transaction's update streams after the re-snapshot's read of its row but at a lower
``source.lsn`` (the race itself is checked on the events): the default order (Kafka offset) keeps
it, as the source table does; a pipeline ordered by ``$source.lsn`` keeps the older read, which is
why ``reprocess validate`` warns (issue 36, item 3).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from sqlalchemy import text

from bench import cdc_source as cdc
from devstack import debezium, kafka_connect
from reprocess.core.runs import RunKind, RunMode, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_spec
from reprocess.kafka import demo_data
from reprocess.runner.start import commit_stored, start_run
from tests.support.helpers import create_compacted_topic, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]

BATCH = 60  # the batched backfill's batch_size: about five batches over the life's topic


def _spec(name: str, topic: str, by_lsn: bool = False) -> PipelineSpec:
    """The life table's pipeline: every column of :data:`cdc.LIFE_COLUMNS`, in the default (Kafka offset)
    order, or ``by_lsn`` (a further column: ``$source.lsn``)."""
    raw: dict[str, Any] = {
        "name": name, "topics": [topic], "format": "debezium", "encoding": "json", "key": list(cdc.LIFE_KEY),
        "target_table": f"{name}.life", "columns": {c.name: dict(c.spec) for c in cdc.LIFE_COLUMNS},
    }  # fmt: skip
    if by_lsn:
        raw["columns"]["lsn"] = {"type": "bigint", "path": "$source.lsn", "required": True}
        raw["ordering"] = {"mode": "column", "column": "lsn"}
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return read_spec(path)


def _run(engine: Any, kafka_config: dict[str, Any], spec: PipelineSpec, run_id: str,
         params: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """Plan, stage (over Connect, in batches when ``params`` has a batch_size) and commit one run: an
    incremental, or a backfill of ``params``."""
    request = RunRequest.incremental() if params is None else RunRequest.from_params(params, RunKind.BACKFILL)
    start_run(engine, kafka_config, spec, request, run_id)
    run_spark_stage(spec, run_id, batch_size=request.batch_size)
    if request.mode is RunMode.REBUILD:
        return commit_stored(engine, spec, run_id)
    return commit_stored(engine, spec, run_id)


def _offsets(topic: str, start: dict[int, int], end: dict[int, int]) -> dict[str, str]:
    return {"start_mode": "offsets", "start_value": json.dumps({topic: {str(p): o for p, o in start.items()}}),
            "end_mode": "offsets", "end_value": json.dumps({topic: {str(p): o for p, o in end.items()}})}  # fmt: skip


def _target(engine: Any, spec: PipelineSpec) -> dict[cdc.Key, cdc.Row]:
    conn = engine.raw_connection()
    try:
        return cdc.target_rows(conn, spec.target_schema, spec.target_table)
    finally:
        conn.close()


def _still_incomplete(engine: Any, spec: PipelineSpec) -> int:
    with engine.connect() as conn:
        query = text("SELECT count(*) FROM reprocess.incomplete_values WHERE pipeline = :p")
        return int(conn.execute(query, {"p": spec.name}).scalar_one())


class Checks:
    """Soft checks over the stages of one life: each stage's differences are printed and kept, so one
    test run shows every stage that went wrong (a later stage may heal or keep an earlier error)."""

    def __init__(self, engine: Any, table: str) -> None:
        self.engine, self.table = engine, table
        self.failed: list[str] = []

    def exact(
        self,
        stage: str,
        spec: PipelineSpec,
        result: Any = None,
        *,
        writes_nothing: bool = False,
        batches_fill_in: bool = False,
    ) -> None:
        expected = cdc.source_rows(self.table)
        diffs = cdc.differences(expected, _target(self.engine, spec))
        problems = [cdc.report(diffs, len(expected))] if diffs else []
        if result is not None and result.dead_letters:
            problems.append(f"{result.dead_letters} dead letters")
        if result is not None and result.values_incomplete:  # every value of this life is known to the run
            if batches_fill_in:  # a batch may record a value the batch holding its key change's delete fills
                still = _still_incomplete(self.engine, spec)
                print(
                    f"[{stage}] {result.values_incomplete} values incomplete when their batch committed; {still} still"
                )
                if still:
                    problems.append(f"{still} values still incomplete")
            else:
                problems.append(f"{result.values_incomplete} values recorded incomplete")
        if writes_nothing and (result.rows_upserted, result.rows_deleted) != (0, 0):
            problems.append(f"wrote rows_upserted={result.rows_upserted} rows_deleted={result.rows_deleted}, not 0/0")
        verdict = "exact" if not problems else "\n".join(problems)
        print(f"[{stage}] {spec.name}: {len(expected)} source rows: {verdict}")
        if problems:
            self.failed.append(f"[{stage}] {verdict}")

    def assert_none_failed(self) -> None:
        assert not self.failed, "the target differs from the source table:\n" + "\n".join(self.failed)


@dataclass(frozen=True)
class Lane:
    """One connector streaming the life table into a topic of ``partitions`` partitions (created
    before the connector starts; keys spread over them by the connector's partitioner), and the
    pipeline that replays it."""

    connector: str
    topic: str
    partitions: int
    live: PipelineSpec

    @property
    def label(self) -> str:
        return f"{self.partitions} partition{'s' if self.partitions > 1 else ''}"


def _phase_end(kafka_config: dict[str, Any], topics: list[str], table: str, phase: int) -> dict[str, dict[int, int]]:
    """Insert the phase's end row and wait for its event in every topic: per topic, each partition's end."""
    marker = f"end-of-phase-{phase}"
    cdc.source(cdc.insert(table, {**cdc.life_row("zz", phase), "name": marker}))
    for topic in topics:
        cdc.wait_for(kafka_config, topic, marker.encode())
    time.sleep(0.5)  # the events before it on the other partitions: sent with it, before any later change
    return {topic: cdc.ends(kafka_config, topic) for topic in topics}


def _snapshot_reads(kafka_config: dict[str, Any], topic: str) -> int:
    """How many snapshots have ended in the topic (events with ``source.snapshot`` "last")."""
    return sum(1 for _, e in cdc.events(kafka_config, topic) if e and e["source"].get("snapshot") == "last")


# The life on one partition under both replica identities, and (DEFAULT) on a 2- and a 3-partition
# topic at once, two connectors on the same table: a key change's delete and create then land on
# different partitions, and batches take the same offset counts of every partition (review V, 2).
@pytest.mark.parametrize(("identity", "partitions"), [("DEFAULT", (1,)), ("FULL", (1,)), ("DEFAULT", (2, 3))],
                         ids=["DEFAULT", "FULL", "DEFAULT-2-and-3-partitions"])  # fmt: skip
def test_a_cdc_life_replays_into_exactly_the_source_table_value_for_value(
    identity, partitions, debezium_connector, kafka_config, engine, unique_name
):
    started = time.monotonic()
    table = unique_name
    eu = [cdc.life_row("eu", i) for i in range(1, 41)]
    eu[19] = cdc.life_row("eu", 20, nulls=True)  # every non-key value NULL
    eu[20] = {**eu[20], "body": "short, stored inline"}  # a small value: never left out
    cdc.source(*cdc.create_table(table, identity=identity), cdc.insert(table, *eu))
    lanes, configs = [], {}
    for n in partitions:
        connector = unique_name if n == 1 else f"{unique_name}_p{n}"
        topic = f"dbz_{connector}.public.{table}"
        if n > 1:
            demo_data.create_topic(kafka_config, topic, n)
        configs[connector] = debezium.connector_config(connector, [f"public.{table}"], f"dbz_{connector}",
                                                       **{"decimal.handling.mode": "string"})  # fmt: skip
        debezium_connector(connector, configs[connector])  # the snapshot: op r for ('eu', 1..40)
        lanes.append(Lane(connector, topic, n, _spec(f"{connector}_live", topic)))

    def wait_for(marker: bytes) -> None:
        for lane in lanes:
            cdc.wait_for(kafka_config, lane.topic, marker)

    # Phase 1, read by the first run (a backfill from the log start).
    for n in range(3):  # updates leaving the large values unchanged: the placeholder every time
        cdc.source(*(cdc.update(table, ("eu", i), {"amount": n * 100 + i, "flag": n % 2 == 0}) for i in range(1, 6)))
    cdc.source(cdc.rekey(table, ("eu", 9), ("eu", 90)))  # a key change; the old key's value: the snapshot's
    cdc.source(cdc.insert(table, cdc.life_row("us", 100)))
    cdc.source(cdc.update(table, ("us", 100), {"name": "Ünïcode ✓"}))
    cdc.source(cdc.rekey(table, ("us", 100), ("us", 101)))  # a key change; the old key's value: inserted above
    cdc.source(cdc.delete(table, ("eu", 6)), cdc.delete(table, ("eu", 7)))
    cdc.source(cdc.rekey(table, ("eu", 8), ("eu", 7)))  # a re-key onto a key deleted in the same run
    cdc.source(cdc.update(table, ("eu", 20), {"name": "was NULL"}))
    cdc.source(cdc.update(table, ("eu", 20), {"name": None}))
    end_1 = _phase_end(kafka_config, [lane.topic for lane in lanes], table, 1)

    checks = Checks(engine, table)
    for lane in lanes:
        checks.exact(f"run 1: backfill, {lane.label}", lane.live,
                     _run(engine, kafka_config, lane.live, f"{lane.live.name}-1", {}))  # fmt: skip

    # Phase 2: a transaction open across a re-snapshot, changes inside one run, the worker SIGKILLed.
    holder = psycopg2.connect(debezium.source_dsn())
    try:
        with holder.cursor() as cur:
            cur.execute(*cdc.update(table, ("eu", 14), {"name": "committed-late", "amount": 14.5}))
        cdc.source(cdc.update(table, ("eu", 15), {"name": "while-open"}))  # the WAL moves on
        wait_for(b"while-open")
        for connector, config in configs.items():  # re-snapshot: op r again
            kafka_connect.put_connector(connector, {**config, "snapshot.mode": "always"})
        cdc.until(
            "the re-snapshot's end", lambda: all(_snapshot_reads(kafka_config, lane.topic) >= 2 for lane in lanes)
        )
        holder.commit()  # its update streams after the snapshot's read of ('eu', 14), at a lower LSN
    finally:
        holder.close()
    wait_for(b"committed-late")
    reads = {}
    for lane in lanes:
        events = cdc.events(kafka_config, lane.topic)  # ('eu', 14)'s events: one partition, in order
        read_at, read = [(o, e) for o, e in events if e and e["op"] == "r" and e["after"]["id"] == 14
                         and e["after"]["region"] == "eu"][-1]  # fmt: skip
        (update_at, update), *_ = [
            (o, e) for o, e in events if e and e["after"] and e["after"]["name"] == "committed-late"
        ]
        assert read["after"]["name"] != "committed-late", "the re-snapshot saw the open transaction's update"
        # The race itself: the update comes later in Kafka but at a lower WAL position than the read.
        assert update_at > read_at and update["source"]["lsn"] < read["source"]["lsn"], (update, read)
        reads[lane.topic] = read
    cdc.source(cdc.rekey(table, ("eu", 17), ("eu", 170)))  # the old key's value: the re-snapshot's read
    cdc.source(cdc.update(table, ("eu", 10), {"name": "updated"}))  # update → delete → re-insert → update
    cdc.source(cdc.delete(table, ("eu", 10)))
    cdc.source(cdc.insert(table, cdc.life_row("eu", 10, 1)))
    cdc.source(cdc.update(table, ("eu", 10), {"amount": -1, "name": "streaming"}))
    cdc.source(cdc.insert(table, cdc.life_row("us", 200)))
    wait_for(b"streaming")
    # Streaming, and its offsets flushed (every second): a worker killed now resumes streaming where its
    # offsets say and re-sends what came after. Killed before, it would snapshot again (its offsets
    # saying the re-snapshot was under way), and a snapshot cannot say which rows went meanwhile.
    time.sleep(1.5)
    for i in range(1, 6):  # a stream of single-row transactions, the worker killed right after them
        cdc.source(cdc.update(table, ("eu", i), {"name": f"stream {i}"}))
    cdc.source(cdc.rekey(table, ("us", 200), ("us", 201)), cdc.update(table, ("eu", 19), {"name": "burst end"}))
    wait_for(b"burst end")
    # The kill is the DEFAULT life's alone: resuming from offsets and slot is the connector's, whatever
    # the table's replica identity, and the worker's JVM restart was ~30 s of the FULL life's CPU.
    if identity == "DEFAULT":
        kafka_connect.kill()  # sent, but its offsets of the last second may not be flushed: those are sent again
    cdc.source(cdc.update(table, ("eu", 2), {"name": "while down"}), cdc.rekey(table, ("eu", 18), ("eu", 180)))
    if identity == "DEFAULT":
        kafka_connect.start()
        for connector, config in configs.items():
            kafka_connect.put_connector(connector, config)  # resumes from its flushed offsets and its slot
    end_2 = _phase_end(kafka_config, [lane.topic for lane in lanes], table, 2)
    for lane in lanes:
        assert _snapshot_reads(kafka_config, lane.topic) == 2, (
            "the restart snapshotted again: the life lost its deletes"
        )
        checks.exact(f"run 2: incremental, {lane.label}", lane.live,
                     _run(engine, kafka_config, lane.live, f"{lane.live.name}-2"))  # fmt: skip

    # Phase 3: key changes across runs (the old key's full value committed by an earlier run).
    cdc.source(cdc.rekey(table, ("eu", 11), ("eu", 110)))
    cdc.source(cdc.rekey(table, ("eu", 12), ("eu", 6)))  # a re-key onto a key deleted in run 1
    cdc.source(cdc.rekey(table, ("eu", 170), ("eu", 171)))  # the new key of run 2's key change, changed again
    cdc.source(cdc.update(table, ("eu", 90), {"name": "after its key change"}))  # large values still unchanged
    cdc.source(cdc.delete(table, ("eu", 16)))
    cdc.source(cdc.insert(table, cdc.life_row("eu", 16, 1)))  # re-inserted in another run than its delete
    cdc.source(cdc.insert(table, cdc.life_row("eu", 9, 1)))  # the old keys of key changes, inserted again: a
    cdc.source(cdc.insert(table, cdc.life_row("us", 200, 1)))  # new row, not the value their new keys took
    tx = [cdc.life_row("tx", i) for i in range(1, 31)]
    cdc.source(  # ONE transaction of 50 row changes
        cdc.insert(table, *tx),
        *(cdc.update(table, ("eu", i), {"amount": i / 4}) for i in range(21, 36)),
        *(cdc.delete(table, ("tx", i)) for i in range(1, 4)),
        *(cdc.rekey(table, ("tx", i), ("tx", 100 + i)) for i in range(4, 6)),
    )
    for n in range(2):
        cdc.source(*(cdc.update(table, ("eu", i), {"flag": n == 1}) for i in (1, 3, 5, 110, 6)))
    end_3 = _phase_end(kafka_config, [lane.topic for lane in lanes], table, 3)
    runs = 0
    for lane in lanes:
        live, topic = lane.live, lane.topic
        checks.exact(f"run 3: incremental, {lane.label}", live, _run(engine, kafka_config, live, f"{live.name}-3"))
        zero = dict.fromkeys(end_1[topic], 0)
        older = _run(engine, kafka_config, live, f"{live.name}-4", _offsets(topic, zero, end_1[topic]))
        checks.exact(f"run 4: older slice [0, {end_1[topic]}) replayed, {lane.label}", live, older, writes_nothing=True)
        again = _run(engine, kafka_config, live, f"{live.name}-5", _offsets(topic, zero, end_3[topic]))
        checks.exact(f"run 5: whole range [0, {end_3[topic]}) replayed, {lane.label}", live, again, writes_nothing=True)

        whole = _spec(f"{lane.connector}_whole", topic)
        checks.exact(f"one backfill of the whole topic, {lane.label}", whole,
                     _run(engine, kafka_config, whole, f"{whole.name}-1", {}))  # fmt: skip
        batched, size = _spec(f"{lane.connector}_batched", topic), BATCH // lane.partitions
        result = _run(engine, kafka_config, batched, f"{batched.name}-1", {"batch_size": size})
        checks.exact(f"a backfill in batches of {size}, {lane.label}", batched, result,
                     batches_fill_in=lane.partitions > 1)  # fmt: skip
        runs += 7
        if identity == "DEFAULT" and lane.partitions == 1:  # by $source.lsn, the re-snapshot's older read wins
            by_lsn = _spec(f"{lane.connector}_lsn", topic, by_lsn=True)
            _run(engine, kafka_config, by_lsn, f"{by_lsn.name}-1", {})
            kept, now = _target(engine, by_lsn)[("eu", 14)]["name"], cdc.source_rows(table)[("eu", 14)]["name"]
            verdict = "the older read" if (kept, now) == (reads[topic]["after"]["name"], "committed-late") else "wrong"
            print(f"[by $source.lsn] ('eu', 14): {kept!r} (the source: {now!r}): {verdict}")
            if verdict == "wrong":
                checks.failed.append(f"[by $source.lsn] ('eu', 14) holds {kept!r}, not the re-snapshot's older read")
            runs += 1
        print(
            f"{identity}, {lane.label}: {sum(end_3[topic].values())} events (per partition {end_1[topic]}, "
            f"{end_2[topic]}, {end_3[topic]} at the phases' ends; {cdc.resent(kafka_config, topic)} re-sent after the "
            "kill)"
        )
    print(f"{identity}: {runs} runs in {time.monotonic() - started:.1f} s")
    checks.assert_none_failed()


@pytest.mark.parametrize("loss", ["delete_records", "compacted"])
def test_a_rebuild_after_the_full_values_left_the_topic_keeps_every_value(
    loss, debezium_connector, kafka_config, engine, unique_name
):
    """Every key's full values (the snapshot's reads, an insert) leave the topic, by delete-records
    below the updates or by compaction; what remains are updates carrying the placeholder. The live
    table holds the values; a rebuild (``mode=rebuild``) must keep them: no NULL, no placeholder."""
    started = time.monotonic()
    table, prefix = unique_name, f"dbz_{unique_name}"
    topic = f"{prefix}.public.{table}"
    if loss == "compacted":
        create_compacted_topic(kafka_config, topic)
    cdc.source(*cdc.create_table(table), cdc.insert(table, *(cdc.life_row("eu", i) for i in range(1, 11))))
    config = debezium.connector_config(unique_name, [f"public.{table}"], prefix, **{"decimal.handling.mode": "string"})
    debezium_connector(unique_name, config)
    cdc.source(cdc.insert(table, cdc.life_row("us", 1)))
    end_1 = _phase_end(kafka_config, [topic], table, 1)[topic][0]
    checks = Checks(engine, table)
    spec = _spec(f"{unique_name}_live", topic)
    checks.exact("run 1: backfill", spec, _run(engine, kafka_config, spec, f"{spec.name}-1", {}))

    for n in range(2):  # every key's newest events: updates leaving the large values unchanged
        cdc.source(*(cdc.update(table, k, {"amount": n + k[1] / 8, "name": f"v{n}"}) for k in cdc.source_rows(table)))
    _phase_end(kafka_config, [topic], table, 2)
    time.sleep(0.2)  # past segment.ms: the next event rolls the segment, and the cleaner sees the updates
    _phase_end(kafka_config, [topic], table, 3)  # (it never reads the active segment)
    checks.exact("run 2: incremental", spec, _run(engine, kafka_config, spec, f"{spec.name}-2"))

    full = [o for o, e in cdc.events(kafka_config, topic) if e and e["op"] in ("r", "c")]
    if loss == "delete_records":  # as kafka-delete-records does: the log start moves past the full values
        admin = AdminClient({"bootstrap.servers": kafka_config["bootstrap.servers"]})
        (deleted,) = admin.delete_records([TopicPartition(topic, 0, end_1)], operation_timeout=30).values()
        assert deleted.result(30).low_watermark == end_1
    else:  # compaction keeps each key's newest event: a placeholder update, but the end rows' inserts
        cdc.until("compaction of the snapshot's reads", lambda: not any(
            e and e["op"] == "r" for _, e in cdc.events(kafka_config, topic)), seconds=90)  # fmt: skip
    left = [o for o, e in cdc.events(kafka_config, topic) if e and e["op"] in ("r", "c")]
    print(f"{loss}: events with full values at offsets {full}; left in the topic: {left}")

    rebuilt = _run(engine, kafka_config, spec, f"{spec.name}-rebuild", {"mode": "rebuild"})
    checks.exact(f"rebuild after {loss}", spec, rebuilt)
    print(f"{loss}: {time.monotonic() - started:.1f} s")
    checks.assert_none_failed()
