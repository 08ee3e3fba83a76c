"""One ordering rule on both engines, for every type an ordering column may have: the newest record of
a key is the same whether Spark's dedupe chose it (both records in one run) or PostgreSQL's merge did
(a run cut between them), in a database whose collation is not byte order (``en_US.UTF-8``, as the
shipped docker-compose.yml's postgres image creates it).

Each case is a pair of records of one key, ``a`` then ``b`` (``b`` at the higher offset), with the
winner written out by hand from the values: the larger value by the type's own order, ties to the later
record; text byte-wise (``"a" > "B"``), as docs/concepts/ordering.md states. Each pair is sent twice: key ``one-<i>``
has both records in one Spark run; key ``cut-<i>`` has ``a`` in the run before, which the test stages
by hand as PostgreSQL's input text of the value (the tests' stage writer, no Spark), and ``b`` in that
same Spark run, whose merge then decides. One Spark run per ordering type, in one Connect session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from confluent_kafka import Producer
from sqlalchemy import text

from reprocess.core.runs import EndMode, RunKind, RunRequest, StartMode
from reprocess.kafka import demo_data
from reprocess.postgres.db import make_engine, migrate
from reprocess.runner.spark_run import read_job
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import connect_session, orders_spec
from tests.support.staging import Record, stage_and_commit

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

B64 = {"01": "AQ==", "0102": "AQI=", "ff": "/w=="}  # bytea is sent as base64 (Kafka Connect's JSON)
BYTEA = {b64: f"\\x{hex_digits}" for hex_digits, b64 in B64.items()}  # ... and staged as PostgreSQL's hex
# type → pairs (a, b, winner): each value the JSON text of field v, a and b on the pipeline's one topic.
CASES: dict[str, list[tuple[str, ...]]] = {
    "bigint": [("10", "9", "a"), ("-1", "-2", "a"), ("5", "5", "b")],
    "integer": [("10", "9", "a"), ("-2", "-1", "b")],
    "smallint": [("10", "9", "a"), ("-1", "-2", "a")],
    "numeric": [
        ("10", "9", "a"),  # as text "9" > "10"
        ("-1", "-2", "a"),  # as text "-2" > "-1"
        ("100", "99.5", "a"),
        ('"1.50e2"', "149", "a"),  # JSON numbers of an exponent or of more than 38 digits are sent as text
        ("0.05", "0.5", "b"),
        ("-0.5", "-0.05", "b"),
        ("1.0", "1", "b"),  # equal values: the later record
        ("0", "-0.0", "b"),
        ('"123456789012345678901234567890123456789012"', '"99999999999999999999999999999999999999999"', "a"),
    ],
    "numeric(10,2)": [("10", "9", "a"), ("1.01", "1.005", "b"), ("-1", "-2", "a")],  # 1.005 is stored 1.01
    "double precision": [("10", "9.5", "a"), ("0.0", "-0.0", "b"), ('"NaN"', "1e308", "a"), ("-1e-300", "-1", "a")],
    "real": [("10", "9.5", "a"), ("0.1", "0.2", "b")],
    "boolean": [("true", "false", "a"), ("false", "true", "b")],
    "date": [('"2026-01-10"', '"2025-12-31"', "a"), ('"0999-01-01"', '"1000-01-01"', "b")],
    "time": [
        ('"10:00:00"', '"10:00"', "b"),  # one value: as text "10:00:00" > "10:00"
        ('"10:00:00.5"', '"10:00:00.500000"', "b"),
        ('"24:00"', '"23:59:59.999999"', "a"),
        ('"09:30"', '"10:00"', "b"),
        ('"10:00:00.000001"', '"10:00"', "a"),  # as text "10:00:00.000001" > "10:00"
    ],
    "timestamp": [('"2026-01-01T10:00:00"', '"2026-01-01 09:00:00"', "a")],
    "timestamptz": [('"2026-01-01T10:00:00+02:00"', '"2026-01-01T09:00:00Z"', "b")],  # 08:00Z < 09:00Z
    # Read from two topics: equal values fall to the topic name, byte-wise too ("_a" > "_B"). A pair is
    # (topic of a, a, topic of b, b, winner) by the topics' name suffixes.
    "text": [
        ("_a", '"a"', "_a", '"B"', "a"),  # byte-wise a > B; en_US puts B after a
        ("_a", '"sales-eu"', "_a", '"salesapac"', "b"),  # en_US ignores the hyphen first
        ("_a", '"é"', "_a", '"f"', "a"),  # é is c3 a9 in UTF-8
        ("_a", '"x"', "_a", '"x"', "b"),
        ("_a", '"v"', "_B", '"v"', "a"),
        ("_B", '"v"', "_a", '"v"', "b"),
        ("_a", '"u"', "_B", '"v"', "b"),
    ],
    "uuid": [('"b0000000-0000-0000-0000-000000000000"', '"A0000000-0000-0000-0000-000000000000"', "a")],
    "bytea": [(f'"{B64["0102"]}"', f'"{B64["01"]}"', "a"), (f'"{B64["01"]}"', f'"{B64["ff"]}"', "b")],
}


@pytest.fixture
def en_us_db(db_url: str, unique_name: str) -> Iterator[str]:
    """The app database again, created with the ``en_US.UTF-8`` collation the postgres image's initdb
    gives the shipped compose file's database (devstack's is ``C``)."""
    admin = psycopg2.connect(db_url.rsplit("/", 1)[0] + "/postgres")
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE \"{unique_name}\" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'en_US.UTF-8'")
    except psycopg2.errors.InvalidParameterValue as exc:
        admin.close()
        pytest.fail(
            f"{exc}: the server has no en_US.UTF-8 locale (embedded PostgreSQL has no ICU). devstack compiles it "
            "into the state folder when PostgreSQL starts (devstack/postgres.py, localedef): install Debian's "
            "locales package, then restart PostgreSQL "
            "(python scripts/services.py stop postgres && python scripts/services.py start postgres)"
        )
    try:
        yield db_url.rsplit("/", 1)[0] + f"/{unique_name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{unique_name}" WITH (FORCE)')
        admin.close()


def _records(pairs: list[tuple[str, ...]], suffixes: list[str]) -> tuple[list[Any], list[Any]]:
    """(the run before, the Spark run): (topic index, key, v's JSON, s) of each record. A pair is
    (a, b, winner), or (topic of a, a, topic of b, b, winner) by the topics' name suffixes."""
    before, spark_run = [], []
    for i, pair in enumerate(pairs):
        (ta, a, tb, b) = pair[:4] if len(pair) == 5 else (suffixes[0], pair[0], suffixes[0], pair[1])
        before.append((suffixes.index(ta), f"cut-{i}", a, "a"))
        spark_run += [(suffixes.index(ta), f"one-{i}", a, "a"), (suffixes.index(tb), f"one-{i}", b, "b")]
        spark_run.append((suffixes.index(tb), f"cut-{i}", b, "b"))
    return before, spark_run


def _produce(kafka_config: dict[str, Any], topics: list[str], records: list[Any]) -> list[Record]:
    """Send the records; returns them as the tests' stage writer takes them, v as PostgreSQL's input text."""
    offsets: dict[str, list[int]] = {}
    producer = Producer(kafka_config)
    for topic, key, v, s in records:
        value = f'{{"id": "{key}", "v": {v}, "s": "{s}"}}'
        on_delivery = lambda err, msg: offsets.setdefault(msg.topic(), []).append(msg.offset())  # noqa: E731
        producer.produce(topics[topic], key=key.encode(), value=value.encode(), on_delivery=on_delivery)
        assert producer.flush(30) == 0
    staged = []
    for topic, key, v, s in records:
        text_of = json.loads(v)
        text_of = BYTEA.get(text_of, str(text_of).lower() if isinstance(text_of, bool) else str(text_of))
        staged.append(Record(0, offsets[topics[topic]].pop(0), {"id": key, "v": text_of, "s": s}, topic=topics[topic]))
    return staged


def _run(engine: Any, kafka_config: dict[str, Any], spark: Any, url: str, spec: Any, run_id: str) -> None:
    """A run from the ledger to the log end, staged as the DAG's Connect launcher does."""
    request = RunRequest(RunKind.INCREMENTAL, StartMode.LEDGER, EndMode.LATEST)
    plan = snapshot_and_migrate(engine, kafka_config, spec, request, run_id)
    read_job(spark, spec=spec.source_file, fingerprint=spec.fingerprint, run_id=plan.run_id, db_url=url,
             kafka_config=json.dumps(kafka_config), batch_size=None, registry_config=None)  # fmt: skip
    commit_stored(engine, spec, plan.run_id)


def test_a_backfill_and_incrementals_cut_between_records_keep_the_same_rows_for_every_ordering_type(
    en_us_db: str, kafka_config: dict[str, Any], unique_name: str
) -> None:
    engine = make_engine(en_us_db)
    migrate(engine)
    pipelines = []
    for n, (kind, pairs) in enumerate(CASES.items()):
        name = f"{unique_name[:40]}_{n}"
        topics = [name] if len(pairs[0]) == 3 else [f"{name}_a", f"{name}_B"]
        for topic in topics:
            demo_data.create_topic(kafka_config, topic, 1)
        spec = orders_spec(
            name, topics[0], topics=topics, key=["id"], ordering={"mode": "column", "column": "v"},
            columns={"id": "text", "v": {"type": kind, "required": True}, "s": "text"}, max_dead_letter_ratio=0,
        )  # fmt: skip
        before, after = _records(pairs, [t[len(name) :] for t in topics])
        expected = {f"{side}-{i}": pair[-1] for i, pair in enumerate(pairs) for side in ("one", "cut")}
        pipelines.append((spec, topics, before, after, expected))
    try:
        for spec, topics, before, in_spark, _ in pipelines:
            stage_and_commit(engine, en_us_db, spec, f"{spec.name}-1", _produce(kafka_config, topics, before),
                             as_text=True)  # fmt: skip
            _produce(kafka_config, topics, in_spark)
        with connect_session() as spark:
            for spec, *_ in pipelines:
                _run(engine, kafka_config, spark, en_us_db, spec, f"{spec.name}-2")
        found, wanted = {}, {}
        with engine.connect() as conn:
            collation = "SELECT datcollate FROM pg_database WHERE datname = current_database()"
            assert conn.execute(text(collation)).scalar() == "en_US.UTF-8"
            for spec, *_, expected in pipelines:
                kind = next(c.sql_type for c in spec.columns if c.name == "v")
                rows = dict(conn.execute(text(f"SELECT id, s FROM {spec.qualified_target}")).all())
                found[kind], wanted[kind] = rows, expected
        assert found == wanted
    finally:
        engine.dispose()
