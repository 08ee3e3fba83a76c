"""Pipeline specs: YAML under ``pipelines/`` parsed once into a frozen :class:`PipelineSpec`.

A spec declares everything a run needs (topics, key, column mapping, ordering, batch size,
schedules), so adding a pipeline is adding a file. Every problem raises :class:`SpecError`
naming the file and the field, which Airflow shows as a DAG import error.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from reprocess.core.column_types import ColumnType as ColumnType  # re-exported: specs name column types
from reprocess.core.column_types import DecimalHandling, parse_type, sql_type
from reprocess.core.derive import Transform, parse_transform, value_fields
from reprocess.core.errors import SpecError
from reprocess.core.formats import Encoding, Format, path_problem
from reprocess.core.ordering import Ordering

# The fields a spec may have; the JSON Schema shipped next to this module (spec.schema.json, for
# editors and ``reprocess validate``) declares the same (tests/unit/test_spec_schema.py).
SPEC_FIELDS: Final = frozenset({
    "name", "description", "topics", "consumer_group", "key", "columns", "target_table", "ordering", "tombstones",
    "batch_size", "max_record_bytes", "max_dead_letter_ratio", "schedule", "reconcile", "owner", "tags", "format",
    "where", "transform", "transform_version", "encoding", "schema_registry", "unavailable_value_placeholder",
    "decimal_handling_mode",
})  # fmt: skip
# What Debezium writes for a value it did not read (an unchanged TOASTed value), unless the
# connector's `unavailable.value.placeholder` says otherwise; the spec's setting of that name follows it.
DEBEZIUM_PLACEHOLDER: Final = "__debezium_unavailable_value"
SCHEMA_FILE: Final = "spec.schema.json"
# The bookkeeping schemas (runs and ledger, stages, deletion markers): never a pipeline's target.
RESERVED_SCHEMAS: Final = frozenset({"reprocess", "reprocess_stage", "reprocess_deleted"})
_IDENT: Final = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# The DAGs that read a pipeline's data (dagfactory.build_dags; reading its coverage needs read
# access to all of them); every generated DAG's id, the reset DAG's too, names the pipeline.
DAG_KINDS: Final = ("backfill", "incremental", "reconcile")
_DAG_ID: Final = re.compile(r"^reprocess_(?P<pipeline>[a-z_][a-z0-9_]*)_(backfill|incremental|reconcile|reset)$")


def pipeline_dag_id(pipeline: str, kind: str) -> str:
    return f"reprocess_{pipeline}_{kind}"


def pipeline_of_dag(dag_id: str) -> str | None:
    """The pipeline a generated DAG belongs to, or None for any other DAG.

    Examples
    --------
    >>> pipeline_of_dag("reprocess_orders_v2_backfill")
    'orders_v2'
    >>> pipeline_of_dag("etl_daily") is None
    True
    """
    match = _DAG_ID.match(dag_id)
    return match.group("pipeline") if match else None


DEFAULT_REGISTRY_CONN: Final = "schema_registry_default"


class TombstoneMode(enum.StrEnum):
    """What a record with a null value (a Kafka tombstone) does."""

    DEAD_LETTER = "dead_letter"  # kept as a dead letter ("empty value"), the key's row untouched
    DELETE = "delete"  # deletes the key's row, as an ordered event (see reprocess/target.py)


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    name: str
    type: ColumnType
    # A dotted path into the value (a Debezium event's row) or a ``$`` path (core/formats.py);
    # the column's name when it has an ``expr``.
    path: str
    required: bool
    expr: str | None = None  # Spark SQL deriving the value (core.derive), instead of a path
    numeric: tuple[int, int] | None = None  # numeric(p,s)'s (precision, scale); None: unconstrained

    def with_required(self) -> ColumnSpec:
        return ColumnSpec(self.name, self.type, self.path, True, self.expr, self.numeric)

    @property
    def sql_type(self) -> str:
        """The PostgreSQL type of the column in the target and the stage (``numeric(20,6)``, ``jsonb``)."""
        return sql_type(self.type, self.numeric)

    @property
    def from_value(self) -> bool:
        """True when the column is a field of the value (a Debezium event's row), not a ``$`` path
        nor an ``expr``."""
        return self.expr is None and not self.path.startswith("$")

    @property
    def json_path(self) -> str:
        return "$." + self.path


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    name: str
    topics: tuple[str, ...]
    consumer_group: str
    key: tuple[str, ...]
    columns: tuple[ColumnSpec, ...]
    target_schema: str
    target_table: str
    ordering: Ordering = field(default_factory=Ordering)
    format: Format = Format.JSON
    encoding: Encoding = Encoding.JSON  # the value's serialization (``avro`` for the avro format)
    schema_registry: str = DEFAULT_REGISTRY_CONN  # the Airflow connection of the Schema Registry
    unavailable_value_placeholder: str = DEBEZIUM_PLACEHOLDER  # debezium: the connector's placeholder text
    # debezium with the JSON converter: the connector's decimal.handling.mode (how a numeric reads)
    decimal_handling: DecimalHandling = DecimalHandling.STRING
    tombstones: TombstoneMode = TombstoneMode.DEAD_LETTER
    batch_size: int = 1_000_000
    max_record_bytes: int = 1_048_576
    max_dead_letter_ratio: float = 0.05
    schedule: str | None = None
    reconcile_cron: str = "0 0 * * *"
    auto_heal: bool = False
    owner: str = "data-eng"
    description: str = ""
    source_file: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    where: str | None = None  # Spark SQL predicate: records it does not keep are counted, not staged
    transform: Transform | None = None
    # Paths of the decoded value the expressions read beyond the path-mapped columns (core.derive).
    value_fields: tuple[str, ...] = ()
    # The deletion markers' table (schema reprocess_deleted); empty: the pipeline's name. Not a
    # spec field: a rebuild's shadow spec names its own (postgres.target.shadow_spec).
    markers_table: str = ""

    @property
    def key_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(c for c in self.columns if c.name in self.key)

    @property
    def unchanged_columns(self) -> tuple[str, ...]:
        """The columns a change event may leave out: Debezium sends a placeholder for an unchanged
        TOASTed value (a large text stored out of line, under REPLICA IDENTITY DEFAULT), and the
        row keeps its current value there (:mod:`reprocess.formats.debezium`). Any non-key column
        of the row, and any non-key ``expr`` column (it is left out when it reads a value the event
        left out: what it derives from did not change); none for the other formats, whose records
        carry whole values."""
        if self.format is not Format.DEBEZIUM:
            return ()
        return tuple(c.name for c in self.columns if (c.from_value or c.expr) and c.name not in self.key)

    @property
    def needs_registry(self) -> bool:
        """Whether records are Avro whose writer schemas come from the Schema Registry."""
        return self.encoding is Encoding.AVRO

    @property
    def qualified_target(self) -> str:
        return f"{self.target_schema}.{self.target_table}"

    def dag_id(self, kind: str) -> str:
        return pipeline_dag_id(self.name, kind)

    def stage_table(self, run_id: str) -> str:
        """Run-scoped stage table name (an identifier: lowercase, bounded length)."""
        import hashlib

        digest = hashlib.sha1(run_id.encode()).hexdigest()[:16]
        return f"{self.name[:40]}_{digest}"

    @classmethod
    def from_file(cls, path: Path) -> PipelineSpec:
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise SpecError(f"{path}: not valid YAML: {exc}") from exc
        return cls.from_mapping(raw, source=str(path))

    @classmethod
    def from_mapping(cls, raw: object, source: str = "<spec>") -> PipelineSpec:
        return _SpecParser(source).parse(raw)

    @property
    def fingerprint(self) -> str:
        """A hash of what decides the derived rows: key, columns (type, path, required, expr),
        ordering, the ``where`` predicate and the transform's declared version.

        Schedules, batch sizes and descriptions do not derive rows, so they do not change it.
        Transforms enter only when a spec has them, so older specs keep their fingerprint.
        """
        import hashlib
        import json

        derives: dict[str, Any] = {
            "key": list(self.key),
            "columns": [[c.name, c.sql_type, c.path, c.required, *([c.expr] if c.expr else [])] for c in self.columns],
            "ordering": [self.ordering.mode.value, self.ordering.column],
        }
        if self.where is not None:
            derives["where"] = self.where
        if self.transform is not None:
            derives["transform"] = [self.transform.function, self.transform.version]
        if self.format is not Format.JSON:  # json specs keep the fingerprint they always had
            derives["format"] = [self.format.value, self.encoding.value]
        if self.unavailable_value_placeholder != DEBEZIUM_PLACEHOLDER:  # likewise debezium specs without one
            derives["placeholder"] = self.unavailable_value_placeholder
        if self.decimal_handling is not DecimalHandling.STRING:  # likewise debezium specs without one
            derives["decimal_handling_mode"] = self.decimal_handling.value
        return hashlib.sha256(json.dumps(derives, sort_keys=True).encode()).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able view, stored in ``reprocess.pipelines`` for audit."""
        return {
            "name": self.name,
            "topics": list(self.topics),
            "consumer_group": self.consumer_group,
            "key": list(self.key),
            "columns": {
                c.name: {
                    "type": c.sql_type,
                    "required": c.required,
                    **({"expr": c.expr} if c.expr else {"path": c.path}),
                }
                for c in self.columns
            },
            "target_table": self.qualified_target,
            "ordering": {"mode": self.ordering.mode.value, "column": self.ordering.column},
            "format": self.format.value,
            "encoding": self.encoding.value,
            "schema_registry": self.schema_registry,
            **(
                {
                    "unavailable_value_placeholder": self.unavailable_value_placeholder,
                    "decimal_handling_mode": self.decimal_handling.value,
                }
                if self.format is Format.DEBEZIUM
                else {}
            ),
            "tombstones": self.tombstones.value,
            "batch_size": self.batch_size,
            "max_record_bytes": self.max_record_bytes,
            "max_dead_letter_ratio": self.max_dead_letter_ratio,
            "schedule": self.schedule,
            "reconcile": {"cron": self.reconcile_cron, "auto_heal": self.auto_heal},
            "where": self.where,
            "transform": self.transform.function if self.transform else None,
            "transform_version": self.transform.version if self.transform else None,
        }


class _SpecParser:
    """Turns a YAML mapping into a spec; each error names the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.paths: dict[str, str] = {}

    def fail(self, field_name: str, problem: str) -> SpecError:
        return SpecError(f"{self.source}: field '{field_name}': {problem}")

    def ident(self, value: object, field_name: str) -> str:
        if not isinstance(value, str) or not _IDENT.match(value):
            raise self.fail(field_name, f"{value!r} is not a lowercase SQL identifier ([a-z_][a-z0-9_]*)")
        return value

    def positive_int(self, raw: Mapping[str, Any], name: str, default: int) -> int:
        value = raw.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(name, f"must be a positive integer, got {value!r}")
        return value

    def parse(self, raw: object) -> PipelineSpec:
        if not isinstance(raw, Mapping):
            raise SpecError(f"{self.source}: a pipeline spec must be a mapping, got {type(raw).__name__}")
        unknown = sorted(map(str, set(raw) - SPEC_FIELDS))
        if unknown:
            raise self.fail(unknown[0], f"unknown field (allowed: {', '.join(sorted(SPEC_FIELDS))})")
        fmt, encoding = self.format(raw)
        name = self.ident(raw.get("name"), "name")
        topics = raw.get("topics")
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
            raise self.fail("topics", f"must be a non-empty list of topic names, got {topics!r}")
        columns = self.columns(raw.get("columns"), fmt)
        self.paths = {c.name: c.path for c in columns}
        names = {c.name for c in columns}
        key = raw.get("key")
        if isinstance(key, str):
            key = [key]
        if not isinstance(key, list) or not key or not all(k in names for k in key):
            raise self.fail("key", f"must list one or more of the columns {sorted(names)}, got {key!r}")
        columns = tuple(c.with_required() if c.name in key else c for c in columns)
        ordering = Ordering.parse(
            raw.get("ordering", "offset"),
            required={c.name: c.required for c in columns},
            topics=topics,
            fail=self.fail,
        )
        schema, _, table = str(raw.get("target_table", f"public.{name}")).rpartition(".")
        if schema in RESERVED_SCHEMAS:
            raise self.fail("target_table", f"schema {schema!r} holds the pipelines' bookkeeping; use another schema")
        ratio = raw.get("max_dead_letter_ratio", 0.05)
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise self.fail("max_dead_letter_ratio", f"must be a number in [0, 1], got {ratio!r}")
        reconcile = raw.get("reconcile", {}) or {}
        if not isinstance(reconcile, Mapping):
            raise self.fail("reconcile", "must be a mapping with 'cron' and 'auto_heal'")
        group = raw.get("consumer_group", f"reprocess-{name}")
        if not isinstance(group, str) or not group:
            raise self.fail("consumer_group", f"must be a non-empty string, got {group!r}")
        schedule = raw.get("schedule")
        if schedule is not None and not isinstance(schedule, str):
            raise self.fail("schedule", f"must be a cron string or preset like '@hourly', got {schedule!r}")
        tombstones = self.tombstones(raw.get("tombstones", _default_tombstones(fmt)), ordering, fmt)
        where, fields = self.derivations(
            columns, raw.get("where"), key if tombstones is TombstoneMode.DELETE else (), fmt
        )
        return PipelineSpec(
            name=name,
            topics=tuple(topics),
            consumer_group=group,
            key=tuple(key),
            columns=columns,
            target_schema=self.ident(schema or "public", "target_table"),
            target_table=self.ident(table, "target_table"),
            ordering=ordering,
            format=fmt,
            encoding=encoding,
            schema_registry=self.registry(raw),
            unavailable_value_placeholder=self.placeholder(raw, fmt),
            decimal_handling=self.decimal_handling(raw, fmt),
            tombstones=tombstones,
            batch_size=self.positive_int(raw, "batch_size", 1_000_000),
            max_record_bytes=self.positive_int(raw, "max_record_bytes", 1_048_576),
            max_dead_letter_ratio=float(ratio),
            schedule=schedule,
            reconcile_cron=str(reconcile.get("cron", "0 0 * * *")),
            auto_heal=bool(reconcile.get("auto_heal", False)),
            owner=str(raw.get("owner", "data-eng")),
            description=str(raw.get("description") or "").strip(),
            source_file=self.source,
            tags=self.tags(raw.get("tags")),
            where=where,
            transform=parse_transform(raw.get("transform"), raw.get("transform_version"), self.fail),
            value_fields=fields,
        )

    def derivations(
        self, columns: tuple[ColumnSpec, ...], where: object, tombstone_key: Collection[str], fmt: Format
    ) -> tuple[str | None, tuple[str, ...]]:
        """Check every ``expr`` and the ``where`` predicate (core.derive); returns the predicate and
        the value paths they read. An expression reads path-mapped columns, not other expressions
        (one evaluation step); a tombstone has no value, so its key columns cannot be derived."""
        plain = {c.name for c in columns if c.expr is None}
        check = functools.partial(path_problem, fmt=fmt)
        fields: list[str] = []
        for c in columns:
            if c.expr is None:
                continue
            if c.name in tombstone_key:
                problem = "a key column of 'tombstones: delete' needs a path: a tombstone has no value to evaluate on"
                raise self.fail(f"columns.{c.name}.expr", f"{problem}; map it by path (from the Kafka key)")
            found = value_fields(c.expr, plain, functools.partial(self.fail, f"columns.{c.name}.expr"), check)
            derived = [f for f in found if f.split(".")[0] in {d.name for d in columns}]
            if derived:
                problem = f"reads {derived[0]!r}, itself an expr column: an expr reads path-mapped columns"
                raise self.fail(f"columns.{c.name}.expr", f"{problem} and value fields (repeat that expression)")
            fields += [f for f in found if f not in fields]
        if where is not None:
            found = value_fields(where, {c.name for c in columns}, functools.partial(self.fail, "where"), check)
            fields += [f for f in found if f not in fields]
            where = str(where)
        return where, tuple(fields)

    def format(self, raw: Mapping[str, Any]) -> tuple[Format, Encoding]:
        try:
            fmt = Format(str(raw.get("format", "json")))
        except ValueError:
            allowed = ", ".join(f.value for f in Format)
            raise self.fail("format", f"{raw.get('format')!r} is not one of: {allowed}") from None
        if "encoding" in raw and fmt is not Format.DEBEZIUM:
            raise self.fail("encoding", f"only a debezium pipeline chooses its encoding; format {fmt.value} has one")
        try:
            encoding = Encoding(str(raw.get("encoding", "avro" if fmt is Format.AVRO else "json")))
        except ValueError:
            raise self.fail("encoding", f"{raw.get('encoding')!r} is not 'json' or 'avro'") from None
        return fmt, encoding

    def placeholder(self, raw: Mapping[str, Any], fmt: Format) -> str:
        """The text that marks a value the connector left out (its ``unavailable.value.placeholder``)."""
        if "unavailable_value_placeholder" not in raw:
            return DEBEZIUM_PLACEHOLDER
        value = raw["unavailable_value_placeholder"]
        if fmt is not Format.DEBEZIUM:
            raise self.fail("unavailable_value_placeholder", f"only a debezium pipeline has one; format {fmt.value}")
        if not isinstance(value, str) or not value:
            raise self.fail(
                "unavailable_value_placeholder",
                f"must be the connector's unavailable.value.placeholder text, got {value!r}",
            )
        return value

    def decimal_handling(self, raw: Mapping[str, Any], fmt: Format) -> DecimalHandling:
        """How the connector writes a numeric (its ``decimal.handling.mode``): under the JSON
        converter a ``precise`` decimal is base64 bytes that cannot be told from a ``string`` one by
        its text, so the spec says which (Avro's schema says it itself)."""
        if "decimal_handling_mode" not in raw:
            return DecimalHandling.STRING
        if fmt is not Format.DEBEZIUM:
            raise self.fail("decimal_handling_mode", f"only a debezium pipeline has one; format {fmt.value}")
        try:
            return DecimalHandling(str(raw["decimal_handling_mode"]))
        except ValueError:
            raise self.fail(
                "decimal_handling_mode",
                f"{raw['decimal_handling_mode']!r} is not 'string' (also reads 'double') or 'precise': "
                "copy the connector's decimal.handling.mode",
            ) from None

    def registry(self, raw: Mapping[str, Any]) -> str:
        conn_id = raw.get("schema_registry", DEFAULT_REGISTRY_CONN)
        if not isinstance(conn_id, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", conn_id):
            raise self.fail("schema_registry", f"must name an Airflow connection, got {conn_id!r}")
        return conn_id

    def tombstones(self, raw: object, ordering: Ordering, fmt: Format) -> TombstoneMode:
        """A tombstone has no payload, so it carries no version: it can only be ordered by its
        place in its partition's log. Under column ordering that place says nothing about the
        versions on other partitions, so ``delete`` needs offset ordering.

        Debezium is the exception: its delete event (``op: d``) carries the source position
        the pipeline orders by, and the Kafka tombstone after it is only for compaction
        (:mod:`reprocess.formats.debezium`), so deletes order by that position."""
        try:
            mode = TombstoneMode(str(raw))
        except ValueError:
            raise self.fail("tombstones", f"{raw!r} is not 'dead_letter' or 'delete'") from None
        if fmt is Format.DEBEZIUM and mode is not TombstoneMode.DELETE:
            raise self.fail("tombstones", "a debezium pipeline deletes on op d and tombstones: use 'delete'")
        if fmt is Format.DEBEZIUM and ordering.column is not None and not self.paths[ordering.column].startswith("$"):
            raise self.fail(
                "ordering.column",
                f"a debezium pipeline's deletes carry no row to read {ordering.column!r} from: order it by offset "
                "(the default, as Debezium's own sinks do; a key's changes stay in order on its partition), or map "
                f"{ordering.column!r} to a commit-ordered envelope path ($...)",
            )
        if mode is TombstoneMode.DELETE and ordering.column is not None and fmt is not Format.DEBEZIUM:
            raise self.fail(
                "tombstones",
                f"'delete' needs ordering: offset; this pipeline orders by {ordering.column!r}, and a tombstone "
                "(null value) has no version to compare, so an older version could resurrect the key or a newer "
                "one be deleted. Order the pipeline by offset to delete on tombstones, or keep them as dead letters",
            )
        return mode

    def tags(self, raw: object) -> tuple[str, ...]:
        if raw is None:
            return ()
        if isinstance(raw, str):
            return (raw,)
        if not isinstance(raw, list):
            raise self.fail("tags", f"must be a list of strings, got {raw!r}")
        return tuple(str(t) for t in raw)

    def columns(self, raw: object, fmt: Format) -> tuple[ColumnSpec, ...]:
        if not isinstance(raw, Mapping) or not raw:
            raise self.fail("columns", "must map column name → {type, path, required}")
        out = []
        for col_name, col in raw.items():
            where = f"columns.{col_name}"
            self.ident(col_name, where)
            if col_name.startswith("_kafka") or col_name == "_run_id":
                raise self.fail(where, "names starting with _kafka and _run_id are lineage columns")
            col = {"type": col} if isinstance(col, str) else col
            if not isinstance(col, Mapping):
                raise self.fail(where, f"must be a type name or a mapping, got {col!r}")
            parsed = parse_type(col.get("type", "text"))
            if isinstance(parsed, str):
                raise self.fail(f"{where}.type", parsed)
            col_type, numeric = parsed
            expr = col.get("expr")
            if expr is not None and "path" in col:
                raise self.fail(f"{where}.expr", "a column takes its value from 'path' or from 'expr', not both")
            path = self.path(col.get("path", col_name), f"{where}.path", fmt)
            out.append(ColumnSpec(col_name, col_type, path, bool(col.get("required", False)), expr, numeric))
        return tuple(out)

    def path(self, path: object, where: str, fmt: Format) -> str:
        problem = path_problem(path, fmt)
        if problem is not None:
            raise self.fail(where, problem)
        return str(path)


def _default_tombstones(fmt: Format) -> str:
    return TombstoneMode.DELETE.value if fmt is Format.DEBEZIUM else TombstoneMode.DEAD_LETTER.value


# Points the DAG files and the ``reprocess`` command at another folder of specs (the tests use it).
PIPELINES_DIR_ENV: Final = "REPROCESS_PIPELINES_DIR"


def pipelines_dir() -> Path:
    """The folder of specs: ``REPROCESS_PIPELINES_DIR`` (the tests use it) or the repo's ``pipelines/``."""
    import os

    return Path(os.environ.get(PIPELINES_DIR_ENV) or Path(__file__).resolve().parents[2] / "pipelines")


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file (``reprocess/core/spec.schema.json`` in the installed package)."""
    import json
    from importlib.resources import files

    return dict(json.loads((files("reprocess.core") / SCHEMA_FILE).read_text()))


def find_spec(name: str, directory: Path | None = None) -> PipelineSpec:
    """The spec named ``name``; the error lists the pipelines that exist."""
    specs = load_specs(directory or pipelines_dir())
    for spec in specs:
        if spec.name == name:
            return spec
    raise SpecError(f"no pipeline named {name!r} in {directory or pipelines_dir()} (have: {[s.name for s in specs]})")


def load_specs(directory: Path) -> list[PipelineSpec]:
    """Every ``*.yaml`` spec in a folder, sorted by name; a name or a target table used twice is an
    error (a pipeline's ledger, ordering and deletion markers describe its own table alone)."""
    specs = [PipelineSpec.from_file(p) for p in sorted(directory.glob("*.yaml"))]
    names: dict[str, str] = {}
    targets: dict[str, str] = {}
    for s in specs:
        if s.name in names:
            raise SpecError(f"{s.source_file}: field 'name': {s.name!r} is also used by {names[s.name]}")
        if s.qualified_target in targets:
            raise SpecError(
                f"{s.source_file}: field 'target_table': {s.qualified_target} is also the target of "
                f"{targets[s.qualified_target]}; two pipelines cannot share a table. Give each its own target_table"
            )
        names[s.name] = s.source_file
        targets[s.qualified_target] = s.source_file
    return specs
