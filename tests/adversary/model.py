"""A scenario as plain data: the pipeline (key, columns, ordering, tombstone rule, partitions), the
records in the order they are produced and the steps run over them; and its case-file form (JSON),
so a failure found by ``make fuzz`` is replayed by the suite from then on.

Nothing here imports the product.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.adversary.values import Column

CASES_DIR = Path(__file__).resolve().parent / "cases"
STEP_KINDS = ("backfill", "incremental", "replay_all", "replay_slice", "catch_up")
# Steps beyond runs (tests/adversary/steps.py): a rebuild, a spec change and its re-derivation, a plan
# then its apply, a run retried after its task died before the commit, a row corrupted then the day's check.
MORE_STEP_KINDS = ("rebuild", "spec_change", "plan_apply", "kill_retry", "corrupt_reconcile")


@dataclass(frozen=True)
class Pipeline:
    key: tuple[Column, ...]
    columns: tuple[Column, ...]  # the key columns first, then the values (the ordering column among them)
    ordering: str | None  # None: offset ordering; else the ordering column's name
    tombstones: str  # "delete" (offset ordering only) or "dead_letter"
    partitions: int
    format: str = "json"  # or "debezium" (tests.adversary.debezium: change events of a model source table), "avro"
    large: tuple[str, ...] = ()  # debezium: the columns an update may leave out (TOASTed)
    paths: tuple[tuple[str, str], ...] = ()  # (column, path) where not the column's own field ("$source.lsn")
    exprs: tuple[tuple[str, str], ...] = ()  # (column, expr) of derived columns
    where: tuple[tuple[str, Any], ...] = ()  # json: tests.adversary.steps' conditions, all must hold

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


@dataclass(frozen=True)
class Record:
    partition: int
    key: bytes | None
    value: bytes | None  # None: a tombstone
    note: str = ""  # what the generator meant (a malformed kind, a duplicate…), for people reading a case
    headers: tuple[tuple[str, str], ...] = ()  # (name, UTF-8 value): Debezium's key-change links
    aborted: bool = False  # produced in a Kafka transaction that is then aborted: never read


@dataclass(frozen=True)
class Step:
    """One run. ``cut``: per partition, the fraction (0-1) of the way from its start to the log end a
    backfill or incremental stops at, or a replayed slice's (start, end) fractions of the ledger;
    ``batch_size``: the run's trigger param (None: the spec's)."""

    kind: str
    cut: tuple[float, ...] = ()
    slice_from: tuple[float, ...] = ()
    batch_size: int | None = None
    change: tuple[Any, ...] = ()  # a step beyond runs: what it changes (tests/adversary/steps.py)


@dataclass(frozen=True)
class Scenario:
    pipeline: Pipeline
    records: tuple[Record, ...]
    steps: tuple[Step, ...]
    seed: int | None = None
    found: dict[str, Any] = field(default_factory=dict)  # a case file's failure: step, expected, actual
    registry: dict[str, Any] = field(default_factory=dict)  # avro: the versions and registry steps (avro.py)

    def to_json(self) -> str:
        def enc(b: bytes | None) -> Any:
            if b is None:
                return None
            try:
                return {"text": b.decode("utf-8")}
            except UnicodeDecodeError:
                return {"base64": base64.b64encode(b).decode()}

        raw = asdict(self)
        raw["records"] = [{**asdict(r), "key": enc(r.key), "value": enc(r.value)} for r in self.records]
        return json.dumps(raw, indent=1, ensure_ascii=False, default=str)

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        def dec(v: Any) -> bytes | None:
            if v is None:
                return None
            return v["text"].encode("utf-8") if "text" in v else base64.b64decode(v["base64"])

        raw = json.loads(text)
        p = raw["pipeline"]

        def col(c: dict[str, Any]) -> Column:
            return Column(c["name"], c["type"], c["required"], tuple(c["numeric"]) if c["numeric"] else None)

        pipeline = Pipeline(
            tuple(map(col, p["key"])), tuple(map(col, p["columns"])), p["ordering"], p["tombstones"], p["partitions"],
            p.get("format", "json"), tuple(p.get("large", ())), tuple(map(tuple, p.get("paths", ()))),
            tuple(map(tuple, p.get("exprs", ()))), _tuples(p.get("where", [])),
        )  # fmt: skip
        records = tuple(
            Record(r["partition"], dec(r["key"]), dec(r["value"]), r.get("note", ""),
                   tuple(map(tuple, r.get("headers", ()))), r.get("aborted", False))
            for r in raw["records"]
        )  # fmt: skip
        steps = tuple(
            Step(s["kind"], tuple(s["cut"]), tuple(s["slice_from"]), s["batch_size"], _tuples(s.get("change", [])))
            for s in raw["steps"]
        )
        return cls(pipeline, records, steps, raw.get("seed"), raw.get("found") or {}, raw.get("registry") or {})


def _tuples(x: Any) -> Any:
    """JSON's lists back into the tuples they were written from."""
    return tuple(map(_tuples, x)) if isinstance(x, list) else x


def case_files() -> list[Path]:
    return sorted(CASES_DIR.glob("*.json"))
