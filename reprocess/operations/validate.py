"""Check pipeline specs before a run does: every problem at once, each with its fix.

Offline: each file against the JSON Schema shipped in the package (what an editor shows too),
then the spec's own rules (:func:`~reprocess.formats.specs.parse_spec`: key columns are columns, the
ordering column is required, ...), and names unique across the folder. Online, per valid spec:
the topics exist (their partition counts), a sample of the newest records decodes by the Spark
job's own rules (the caller passes the decoder: this layer never imports Spark) and carries the
key and ordering fields, every mapped path and header is held by some sampled record (else the
closest one that is) and no optional column is NULL in every row, and the target table takes the
spec in place, or what ``mode=rebuild`` would change. The backfill's dry run reports the same
online findings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Engine

from reprocess.core.errors import SpecError, SpecSchemaError
from reprocess.core.ordering import UNORDERED_POSITIONS
from reprocess.core.sample import SampleRecord, SampleResult
from reprocess.core.spec import KEPT_TOMBSTONE, PipelineSpec
from reprocess.core.spec_schema import schema_problems
from reprocess.core.spec_yaml import load_spec_yaml
from reprocess.formats.specs import parse_spec
from reprocess.operations.dead_columns import dead_columns
from reprocess.operations.findings import Finding, Severity
from reprocess.postgres.evolve import table_diff

SAMPLE_TIMEOUT_S: Final = 10
_TOMBSTONE_FIX: Final = (
    "a tombstone (a record with a null value) is a dead letter by the spec's `tombstones: dead_letter` (the "
    "default), not counted in max_dead_letter_ratio; to have it delete its key's row, set `tombstones: delete` "
    "(it needs `ordering: offset`)"
)


Decoder = Callable[[PipelineSpec, Sequence[SampleRecord]], SampleResult]


@dataclass
class Report:
    specs: list[PipelineSpec] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    def as_dict(self) -> dict[str, Any]:
        return {
            "specs": [s.source_file for s in self.specs],
            "errors": len(self.errors),
            "findings": [asdict(f) for f in self.findings],
        }


def validate_offline(paths: Iterable[Path]) -> Report:
    """Schema and rules of every spec file under ``paths`` (files or folders of ``*.yaml``): the
    same reading as the DAG factory's (:func:`~reprocess.formats.specs.parse_spec`), with every
    schema problem listed rather than the first."""
    report = Report()
    for path in _spec_files(paths, report):
        try:
            raw = load_spec_yaml(path)
        except SpecError as exc:
            fix = "fix the YAML at the position shown"
            report.findings.append(Finding(str(path), "yaml", Severity.ERROR, _problem_of(exc, path), fix))
            continue
        for problem in schema_problems(raw):
            report.findings.append(
                Finding(str(path), "schema", Severity.ERROR, f"{problem.field}: {problem.problem}", problem.fix)
            )
        try:
            report.specs.append(parse_spec(raw, source=str(path)))
        except SpecSchemaError:
            pass  # listed above, one finding per place (the DAG factory's broken-spec DAG shows them all)
        except SpecError as exc:  # the words the DAG factory's broken-spec DAG shows, too
            fix = "change the field as the problem says"
            report.findings.append(Finding(str(path), "spec", Severity.ERROR, _problem_of(exc, path), fix))
    seen: dict[str, str] = {}
    for spec in report.specs:
        if spec.name in seen:
            report.findings.append(
                Finding(
                    spec.source_file,
                    "spec",
                    Severity.ERROR,
                    f"name {spec.name!r} is also used by {seen[spec.name]}",
                    "give each pipeline its own name (DAG ids derive from it)",
                )
            )
        seen.setdefault(spec.name, spec.source_file)
        report.findings += _ordering(spec)
    return report


def _ordering(spec: PipelineSpec) -> list[Finding]:
    """A warning for a pipeline ordered by an envelope position that is not commit-ordered."""
    column = next((c for c in spec.columns if c.name == spec.ordering.column), None)
    why = UNORDERED_POSITIONS.get(column.path) if column is not None else None
    if column is None or why is None:
        return []
    return [
        Finding(
            spec.source_file,
            "ordering",
            Severity.WARNING,
            f"ordering by {column.name!r} ({column.path}) can keep an older row: {why}",
            "use `ordering: offset` (the default, the Kafka order Debezium's own sinks follow); changing a "
            "pipeline's ordering takes a run with mode=rebuild",
        )
    ]


def _spec_files(paths: Iterable[Path], report: Report) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.yaml"))
            if not found:
                report.findings.append(
                    Finding(
                        str(path),
                        "yaml",
                        Severity.WARNING,
                        "no *.yaml spec in this folder",
                        "name spec files <pipeline>.yaml",
                    )
                )
            files += found
        elif path.is_file():
            files.append(path)
        else:
            report.findings.append(
                Finding(
                    str(path), "yaml", Severity.ERROR, "no such file or folder", "pass spec files or folders of them"
                )
            )
    return files


def _problem_of(error: SpecError, path: Path) -> str:
    return str(error).removeprefix(f"{path}: ")


def validate_online(
    spec: PipelineSpec, kafka: Mapping[str, Any], engine: Engine, decode: Decoder | None, sample: int
) -> list[Finding]:
    """Topics, a decoded sample of the newest ``sample`` records per partition, the target table.

    ``decode`` is None where no Spark is at hand (the finding says how to run the check).
    """
    findings = _topics(spec, kafka)
    if not any(f.severity is Severity.ERROR for f in findings):
        findings += _sample(spec, kafka, decode, sample)
    findings += _table(spec, engine)
    return findings


def _topics(spec: PipelineSpec, kafka: Mapping[str, Any]) -> list[Finding]:
    from reprocess.kafka.clients import make_admin

    topics = make_admin(kafka).list_topics(timeout=SAMPLE_TIMEOUT_S).topics
    out = []
    for topic in spec.topics:
        meta = topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            out.append(
                Finding(
                    spec.source_file,
                    "topic",
                    Severity.ERROR,
                    f"topic {topic!r} does not exist on {kafka.get('bootstrap.servers')}",
                    f"create it (kafka-topics.sh --create --topic {topic} --partitions N) or correct `topics:`",
                )
            )
        else:
            out.append(
                Finding(spec.source_file, "topic", Severity.OK, f"topic {topic!r}: {len(meta.partitions)} partitions")
            )
    return out


def sample_records(kafka: Mapping[str, Any], spec: PipelineSpec, per_partition: int) -> list[SampleRecord]:
    """The newest ``per_partition`` committed records of every partition (read_committed, assign)."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KTP

    from reprocess.kafka.clients import make_consumer
    from reprocess.kafka.offsets import take_snapshot

    out: list[SampleRecord] = []
    consumer = make_consumer(kafka)
    try:
        for snap in take_snapshot(kafka, spec, spec.topics):
            start = max(snap.log_start, snap.log_end - per_partition)
            if start >= snap.log_end:
                continue
            consumer.assign([KTP(snap.topic, snap.partition, start)])
            while (msg := consumer.poll(SAMPLE_TIMEOUT_S)) is not None:
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    break
                if error is not None:
                    raise SpecError(
                        f"{spec.name} {snap.topic}[{snap.partition}]: sampling failed: {error}",
                        pipeline=spec.name,
                        topic=snap.topic,
                        partition=snap.partition,
                    )
                offset = msg.offset()
                if offset is None or offset >= snap.log_end:
                    break
                value, key = msg.value(), msg.key()
                headers = tuple((str(h[0]), h[1] if isinstance(h[1], bytes) else None) for h in msg.headers() or ())
                out.append(SampleRecord(snap.topic, snap.partition, offset, msg.timestamp()[1], key, value, headers))
    finally:
        consumer.close()
    return out


def _sample(spec: PipelineSpec, kafka: Mapping[str, Any], decode: Decoder | None, per_partition: int) -> list[Finding]:
    src = spec.source_file
    if decode is None:
        return [
            Finding(
                src,
                "sample",
                Severity.WARNING,
                "records were not decoded here (spark_default is not a Spark Connect server)",
                f"run `reprocess validate {src}` where Spark is at hand",
            )
        ]
    records = sample_records(kafka, spec, per_partition)
    if not records:
        return [
            Finding(
                src,
                "sample",
                Severity.WARNING,
                "the topics hold no records to sample",
                "produce records, then validate again",
            )
        ]
    result = decode(spec, records)
    dead = sum(n for n, _, _ in result.errors.values())
    out = [
        Finding(
            src,
            "sample",
            Severity.OK,
            f"{result.records} newest records decoded: {result.records - dead} rows, {dead} dead letters",
        )
    ]
    if dead:
        # As a run's ratio: tombstones the spec keeps as dead letters are its rule, not a producer's fault.
        kept = result.errors.get(KEPT_TOMBSTONE, (0,))[0]
        landable = result.records - kept
        broken = landable and (dead - kept) / landable > spec.max_dead_letter_ratio
        for kind, (n, offset, example) in sorted(result.errors.items(), key=lambda e: -e[1][0]):
            tombstone = kind == KEPT_TOMBSTONE
            out.append(
                Finding(
                    src,
                    "sample",
                    Severity.ERROR if broken and not tombstone else Severity.WARNING,
                    f"{n} of {result.records} sampled records would be dead letters: "
                    + (f"{kind} (e.g. offset {offset})" if tombstone else f"{kind} (e.g. offset {offset}: {example})"),
                    _TOMBSTONE_FIX
                    if tombstone
                    else "correct the column's path, type or `required` in the spec, or the producer; a run fails "
                    f"when dead letters exceed max_dead_letter_ratio {spec.max_dead_letter_ratio}",
                )
            )
    for column, n in result.missing.items():
        if column not in spec.key and column != spec.ordering.column:
            continue
        role = "ordering" if column == spec.ordering.column else "key"
        out.append(
            Finding(
                src,
                "sample",
                Severity.ERROR,
                f"{n} of {result.records} decoded records have no {role} field {column!r}",
                f"point columns.{column}.path at the field that holds it, and mark it required",
            )
        )
    if result.transform_not_run and spec.transform is not None:
        unjudged = f"the columns it may set ({', '.join(spec.transform_columns)}) were not checked for NULLs"
        out.append(
            Finding(
                src,
                "transform",
                Severity.ERROR if result.transform_failed else Severity.WARNING,
                f"the transform {spec.transform.function!r} failed on the sample ({result.transform_not_run}); "
                f"{unjudged}"
                if result.transform_failed
                else f"the transform {spec.transform.function!r} was not run on the sample "
                f"({result.transform_not_run}), so {unjudged}",
                "fix the function: a run fails the same way"
                if result.transform_failed
                else "run validate where the function's module is installed (as it is where a run's Spark client runs)",
            )
        )
    return out + dead_columns(spec, records, result)


def _table(spec: PipelineSpec, engine: Engine) -> list[Finding]:
    src, target = spec.source_file, spec.qualified_target
    with engine.connect() as conn:
        diff = table_diff(conn, spec)
    if diff is None:
        return [Finding(src, "table", Severity.OK, f"{target} does not exist yet; the first run creates it")]
    if diff.in_place:
        added = ", ".join(c.name for c in diff.added)
        what = f"the next run adds the nullable column(s) {added}" if added else "it matches the spec"
        return [Finding(src, "table", Severity.OK, f"{target} takes the spec in place: {what}")]
    return [
        Finding(
            src,
            "table",
            Severity.ERROR,
            f"{target} cannot take the spec in place: {'; '.join(diff.changes)}",
            f"trigger {spec.dag_id('backfill')} with mode=rebuild (Safety section): it rebuilds the table "
            "from the log into a shadow table and swaps it in with exactly these changes; or undo the spec "
            "change",
        )
    ]


def format_findings(report: Report) -> str:
    lines = [f.render() for f in report.findings]
    errors = len(report.errors)
    warnings = sum(f.severity is Severity.WARNING for f in report.findings)  # OK findings are not warnings
    verdict = "no problems" if not errors else f"{errors} problem(s)"
    verdict += f", {warnings} warning(s)" if warnings else ""
    lines.append(f"{len(report.specs)} valid spec(s); {verdict}")
    return "\n".join(lines)
