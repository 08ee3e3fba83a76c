"""A Hypothesis state machine drives the commit protocol on real Postgres against a plain model.

Each example draws a two-partition log (rows with out-of-order versions, tombstones, dead
letters) and a pipeline ordered by offset (tombstones delete) or by version. Steps interleave
backfills of random ranges, incrementals, replays of committed runs, killed attempts (planned
and staged, never committed), late commits of those (fenced when the ledger moved) and double
commits. Stage rows are written by the product's own stage writer; the commit is the product's.
After every step the target, the deletion markers, the dead letters and the ledger must equal
``tests/support/protocol_model.py``.

CI runs a fixed, derandomized profile (< 2 minutes); ``REPROCESS_MODEL_PROFILE=long`` explores
more examples with fresh randomness for local runs.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sqlalchemy import text

from reprocess.core.errors import FencedRunError
from reprocess.core.ranges import OffsetRange
from reprocess.formats.specs import parse_spec
from reprocess.postgres.target import MARKERS_SCHEMA
from reprocess.runner.start import commit_stored
from tests.support.protocol_model import LogRecord, ProtocolModel
from tests.support.staging import Record, mark_staged, plan_ranges, write_stage

PARTITIONS = (0, 1)
KEYS = ("a", "b", "c", "d")
_names = itertools.count()

settings.register_profile(
    "ci", max_examples=25, stateful_step_count=10, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)  # fmt: skip
settings.register_profile(
    "long", max_examples=300, stateful_step_count=25, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)  # fmt: skip
PROFILE = settings.get_profile(os.environ.get("REPROCESS_MODEL_PROFILE", "ci"))


def _log(by_version: bool) -> st.SearchStrategy[dict[int, list[LogRecord]]]:
    """Per partition up to 8 records; with offset ordering a key lives on one partition."""

    def partition(p: int) -> st.SearchStrategy[list[LogRecord]]:
        keys = KEYS if by_version else KEYS[p::2]
        kinds = ["row", "row", "dead"] + (["tombstone"] if not by_version else [])
        entry = st.tuples(st.sampled_from(kinds), st.sampled_from(keys), st.integers(0, 4))
        return st.lists(entry, max_size=8).map(
            lambda xs: [LogRecord(p, o, kind, key, f"{key}@{p}.{o}", v) for o, (kind, key, v) in enumerate(xs)]
        )

    return st.tuples(*(partition(p) for p in PARTITIONS)).map(lambda parts: dict(zip(PARTITIONS, parts, strict=True)))


class CommitProtocol(RuleBasedStateMachine):
    engine: Any
    db_url: str

    @initialize(data=st.data(), by_version=st.booleans())
    def start(self, data: st.DataObject, by_version: bool) -> None:
        self.name = f"model_{os.getpid()}_{next(_names)}"
        self.by_version = by_version
        self.log = data.draw(_log(by_version), label="log")
        ordering: Any = {"mode": "column", "column": "v"} if by_version else "offset"
        self.spec = parse_spec(
            {"name": self.name, "topics": [self.name], "key": ["id"], "target_table": f"{self.name}.t",
             "columns": {"id": "text", "v": {"type": "bigint", "required": True}, "s": "text"},
             "ordering": ordering, "tombstones": "dead_letter" if by_version else "delete",
             "max_dead_letter_ratio": 1.0},
            source=f"{self.name}.yaml",
        )  # fmt: skip
        self.model = ProtocolModel(by_version)
        self.runs = itertools.count()
        self.pending: list[tuple[str, str, dict[int, tuple[int, int]]]] = []
        self.committed: list[tuple[str, dict[int, tuple[int, int]]]] = []

    # ------------------------------------------------------------------ product calls
    def _records(self, ranges: dict[int, tuple[int, int]]) -> list[Record]:
        out = []
        for p, (start, end) in ranges.items():
            for r in self.log[p][start:end]:
                if r.kind == "dead":
                    out.append(Record(p, r.offset, None, topic=self.name))
                elif r.kind == "tombstone":
                    out.append(Record(p, r.offset, {"id": r.key}, topic=self.name, tombstone=True))
                else:
                    out.append(Record(p, r.offset, {"id": r.key, "v": r.version, "s": r.value}, topic=self.name))
        return out

    def _plan_and_stage(self, kind: str, ranges: dict[int, tuple[int, int]]) -> str:
        run_id = f"{self.name}-{next(self.runs)}"
        offsets = [OffsetRange(self.name, p, s, e) for p, (s, e) in sorted(ranges.items())]
        plan_ranges(self.engine, self.spec, run_id, kind, offsets)
        mark_staged(self.engine, run_id, write_stage(self.db_url, self.spec, run_id, self._records(ranges)))
        return run_id

    def _commit(self, run_id: str, kind: str, ranges: dict[int, tuple[int, int]]) -> None:
        starts = {p: s for p, (s, _) in ranges.items()}
        if kind == "incremental" and self.model.fenced(starts):
            with pytest.raises(FencedRunError):
                commit_stored(self.engine, self.spec, run_id)
            return
        result = commit_stored(self.engine, self.spec, run_id)
        assert not result.already_committed
        self.model.commit(ranges, self.log)
        self.committed.append((run_id, ranges))

    def _incremental_ranges(self) -> dict[int, tuple[int, int]]:
        return {p: (self.model.ledger.get(p, 0), len(self.log[p])) for p in PARTITIONS}

    # ------------------------------------------------------------------ steps
    @rule(data=st.data())
    def backfill(self, data: st.DataObject) -> None:
        chosen = data.draw(st.sets(st.sampled_from(PARTITIONS), min_size=1), label="partitions")
        ranges = {}
        for p in sorted(chosen):
            bounds = sorted(data.draw(st.lists(st.integers(0, len(self.log[p])), min_size=2, max_size=2)))
            ranges[p] = (bounds[0], bounds[1])
        self._commit(self._plan_and_stage("backfill", ranges), "backfill", ranges)

    @rule()
    def incremental(self) -> None:
        ranges = self._incremental_ranges()
        self._commit(self._plan_and_stage("incremental", ranges), "incremental", ranges)

    @precondition(lambda self: bool(self.committed))
    @rule(data=st.data())
    def replay_a_committed_run(self, data: st.DataObject) -> None:
        _, ranges = data.draw(st.sampled_from(self.committed), label="replayed")
        self._commit(self._plan_and_stage("backfill", ranges), "backfill", ranges)

    @rule(incremental=st.booleans(), data=st.data())
    def killed_attempt(self, incremental: bool, data: st.DataObject) -> None:
        """Planned and staged, then the worker died before the commit: nothing may change."""
        if incremental:
            kind, ranges = "incremental", self._incremental_ranges()
        else:
            p = data.draw(st.sampled_from(PARTITIONS))
            bounds = sorted(data.draw(st.lists(st.integers(0, len(self.log[p])), min_size=2, max_size=2)))
            kind, ranges = "backfill", {p: (bounds[0], bounds[1])}
        self.pending.append((self._plan_and_stage(kind, ranges), kind, ranges))

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data())
    def late_commit_of_a_killed_attempt(self, data: st.DataObject) -> None:
        """The retried commit task finally runs; an incremental whose start the ledger left is fenced."""
        run = data.draw(st.sampled_from(self.pending), label="late")
        self.pending.remove(run)
        self._commit(*run)

    @precondition(lambda self: bool(self.committed))
    @rule(data=st.data())
    def double_commit(self, data: st.DataObject) -> None:
        run_id, _ = data.draw(st.sampled_from(self.committed), label="again")
        assert commit_stored(self.engine, self.spec, run_id).already_committed

    # ------------------------------------------------------------------ the check
    @invariant()
    def postgres_equals_the_model(self) -> None:
        if not hasattr(self, "spec"):
            return
        with self.engine.connect() as conn:
            exists = conn.execute(text("SELECT to_regclass(:t)"), {"t": f"{self.name}.t"}).scalar()
            target = {} if exists is None else {
                r[0]: (r[1], r[2], r[3])
                for r in conn.execute(text(f"SELECT id, s, _kafka_partition, _kafka_offset FROM {self.name}.t"))
            }  # fmt: skip
            markers = {}
            if not self.by_version and exists is not None:
                markers = {
                    r[0]: (r[1], r[2])
                    for r in conn.execute(
                        text(f'SELECT id, _kafka_partition, _kafka_offset FROM {MARKERS_SCHEMA}."{self.name}"')
                    )
                }
            dead = {
                (r[0], r[1])
                for r in conn.execute(
                    text('SELECT partition, "offset" FROM reprocess.dead_letters WHERE pipeline = :p'), {"p": self.name}
                )
            }
            ledger = dict(
                conn.execute(
                    text("SELECT partition, next_offset FROM reprocess.consumer_offsets WHERE pipeline = :p"),
                    {"p": self.name},
                ).all()
            )
        assert target == self.model.target()
        assert markers == self.model.markers()
        assert dead == self.model.dead
        assert ledger == self.model.ledger


@pytest.fixture
def protocol_machine(engine, db_url):
    CommitProtocol.engine = engine
    CommitProtocol.db_url = db_url
    return CommitProtocol


def test_commit_protocol_matches_the_model(protocol_machine):
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(protocol_machine, settings=PROFILE)
