"""The pipeline spec: a frozen :class:`PipelineSpec` holding everything a run needs (topics, key,
column mapping, ordering, batch size, schedules), so adding a pipeline is adding a file.

Each field of :class:`PipelineSpec` declares once which key of a spec file it is read from and its
default: the parser's known keys (:data:`SPEC_FIELDS`) and defaults (:data:`SPEC_DEFAULTS`) are
derived from it, and a test holds the JSON Schema shipped for editors (``spec.schema.json``) to it.
Parsing is :mod:`reprocess.core.spec_parse` (format-neutral); callers read a mapping, a file or a folder
through :mod:`reprocess.formats.specs`, which adds the format's rules.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Final

from reprocess.core import names
from reprocess.core.column_types import ColumnType as ColumnType  # re-exported: specs name column types
from reprocess.core.column_types import DecimalHandling, sql_type
from reprocess.core.derive import Transform
from reprocess.core.formats import Encoding, Format
from reprocess.core.ordering import Ordering

# What Debezium writes for a value it did not read (an unchanged TOASTed value), unless the
# connector's `unavailable.value.placeholder` says otherwise; the spec's setting of that name follows it.
DEBEZIUM_PLACEHOLDER: Final = "__debezium_unavailable_value"
# The Airflow connection of the Schema Registry, unless a spec names another.
DEFAULT_REGISTRY_CONN: Final = "schema_registry_default"
# A spec file's format when it names none.
_DEFAULT_FORMAT: Final = Format.JSON
# The ``schedule`` that starts the incremental when records arrive (reprocess.airflow.new_records).
ON_NEW_RECORDS: Final = "on_new_records"


# The DAGs that read a pipeline's data (reprocess.airflow.factory builds them; reading its coverage
# needs read access to all of them); every generated DAG's id, the reset DAG's too, names the pipeline.
class TombstoneMode(enum.StrEnum):
    """What a record with a null value (a Kafka tombstone) does."""

    DEAD_LETTER = "dead_letter"  # kept as a dead letter (KEPT_TOMBSTONE), the key's row untouched
    DELETE = "delete"  # deletes the key's row, as an ordered event (see reprocess.postgres.target)


# A tombstone's dead letter under ``tombstones: dead_letter``: the spec's rule, not a broken producer
# (the dead-letter ratio does not count it; ``reprocess validate`` gives the setting as the fix).
KEPT_TOMBSTONE: Final = "tombstone (null value) kept as a dead letter by tombstones dead_letter"


@dataclass(frozen=True, slots=True)
class FormatFacts:
    """What the spec's format decided about it when the spec was parsed (its decoder's answers,
    :mod:`reprocess.core.format_rules`), carried as values so the layers that never ask a decoder
    (postgres, the fingerprint, the audit view) read them without branching on the format."""

    default_tombstones: TombstoneMode = TombstoneMode.DEAD_LETTER  # the format's rule when the spec names none
    unchanged_columns: tuple[str, ...] = ()  # the columns a record may leave out (PipelineSpec.unchanged_columns)
    own_keys: tuple[str, ...] = ()  # the spec keys only some formats have that this one reads


# The largest record value a decoder reads; a larger one is a dead letter.
MAX_RECORD_BYTES: Final = 1_048_576


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
    # A json/jsonb column of the json format: a JSON string field is the JSON text it holds (else the string).
    string_is_json: bool = False

    def with_required(self) -> ColumnSpec:
        return replace(self, required=True)

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


def _derives(c: ColumnSpec) -> list[str]:
    """A column's fingerprint entries past (name, type, path, required), only when set (a spec
    without them keeps the fingerprint it had)."""
    return [*([c.expr] if c.expr else []), *(["string_is_json"] if c.string_is_json else [])]


def _read_from(*keys: str) -> dict[str, tuple[str, ...]]:
    """A field's metadata when the spec file's keys it is read from are not its own name: a dotted
    key is a key inside another (``reconcile.cron``); no key, a field the file does not set."""
    return {"file_keys": keys}


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    """A pipeline as its spec file declares it, parsed by :func:`reprocess.formats.specs.parse_spec`.

    Every field is read from the spec file's key of the same name unless its metadata names others
    (:func:`file_keys`); a default here is the default of that key.
    """

    name: str
    topics: tuple[str, ...]
    consumer_group: str  # default reprocess-<name>
    key: tuple[str, ...]
    columns: tuple[ColumnSpec, ...]
    target_schema: str = field(metadata=_read_from("target_table"))  # its schema part; default public
    target_table: str  # default <name>
    ordering: Ordering = field(default_factory=Ordering)
    format: Format = _DEFAULT_FORMAT
    # the value's serialization (``avro`` for the avro format; only a debezium spec chooses it)
    encoding: Encoding = Encoding.JSON
    schema_registry: str = DEFAULT_REGISTRY_CONN  # the Airflow connection of the Schema Registry
    unavailable_value_placeholder: str = DEBEZIUM_PLACEHOLDER  # debezium: the connector's placeholder text
    # debezium with the JSON converter: the connector's decimal.handling.mode (how a numeric reads)
    decimal_handling: DecimalHandling = field(
        default=DecimalHandling.STRING, metadata=_read_from("decimal_handling_mode")
    )
    tombstones: TombstoneMode = TombstoneMode.DEAD_LETTER  # debezium: delete, always
    batch_size: int = 4_000_000
    max_record_bytes: int = MAX_RECORD_BYTES
    max_dead_letter_ratio: float = 0.05
    schedule: str | None = None
    min_interval_seconds: int = 60  # schedule on_new_records: the least time between two runs it starts
    reconcile_cron: str = field(default="0 0 * * *", metadata=_read_from("reconcile.cron"))
    auto_heal: bool = field(default=False, metadata=_read_from("reconcile.auto_heal"))
    # the whole-table audit's DAG (reprocess.operations.audit): weekly; auto_heal heals what it finds
    audit_cron: str = field(default="@weekly", metadata=_read_from("audit.cron"))
    audit_auto_heal: bool = field(default=False, metadata=_read_from("audit.auto_heal"))
    owner: str = "data-eng"
    description: str = ""
    source_file: str = field(default="", metadata=_read_from())  # the file it was read from
    tags: tuple[str, ...] = field(default_factory=tuple)
    where: str | None = None  # Spark SQL predicate: records it does not keep are counted, not staged
    transform: Transform | None = field(
        default=None, metadata=_read_from("transform", "transform_version", "transform_derives")
    )
    # Paths of the decoded value the expressions read beyond the path-mapped columns (core.derive).
    value_fields: tuple[str, ...] = field(default=(), metadata=_read_from())
    # The deletion markers' table (schema reprocess_deleted); empty: the pipeline's name. Not a
    # spec field: a rebuild's shadow spec names its own (postgres.target.shadow_spec).
    markers_table: str = field(default="", metadata=_read_from())
    facts: FormatFacts = field(default_factory=FormatFacts, metadata=_read_from())  # set by the parser

    @property
    def key_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(c for c in self.columns if c.name in self.key)

    @property
    def unchanged_columns(self) -> tuple[str, ...]:
        """The columns a change event may leave out: Debezium sends a placeholder for an unchanged
        TOASTed value (a large text stored out of line, under REPLICA IDENTITY DEFAULT), and the
        row keeps its current value there (:mod:`reprocess.formats.debezium`). The format's decoder
        says which when the spec is parsed (:class:`FormatFacts`); none for a format whose records
        carry whole values."""
        return self.facts.unchanged_columns

    @property
    def transform_columns(self) -> tuple[str, ...]:
        """The columns the ``transform:`` function may set: those its ``transform_derives`` lists, else
        every column but the key's (none without a function)."""
        if self.transform is None:
            return ()
        if self.transform.derives is not None:
            return self.transform.derives
        return tuple(c.name for c in self.columns if c.name not in self.key)

    @property
    def needs_registry(self) -> bool:
        """Whether records are Avro whose writer schemas come from the Schema Registry."""
        return self.encoding is Encoding.AVRO

    @property
    def qualified_target(self) -> str:
        return f"{self.target_schema}.{self.target_table}"

    def dag_id(self, kind: str) -> str:
        return names.pipeline_dag_id(self.name, kind)

    def stage_table(self, run_id: str) -> str:
        """Run-scoped stage table name (an identifier: lowercase, bounded length)."""
        return names.stage_table(self.name, run_id)

    @property
    def fingerprint(self) -> str:
        """A hash of what decides the derived rows: key, columns (type, path, required, expr),
        ordering, the ``where`` predicate, the transform's declared version, the tombstone rule and
        the record size limit (a record over it, or a tombstone under ``dead_letter``, is a dead
        letter rather than a row or a delete).

        Schedules, batch sizes and descriptions do not derive rows, so they do not change it; nor
        does ``max_dead_letter_ratio``, which decides whether a run commits, not what it writes.
        Transforms, tombstone rules and limits enter only when a spec sets them off their defaults,
        so older specs keep their fingerprint.
        """
        import hashlib
        import json

        derives: dict[str, Any] = {
            "key": list(self.key),
            "columns": [[c.name, c.sql_type, c.path, c.required, *_derives(c)] for c in self.columns],
            "ordering": [self.ordering.mode.value, self.ordering.column],
        }
        if self.where is not None:
            derives["where"] = self.where
        if self.transform is not None:
            derives["transform"] = [self.transform.function, self.transform.version]
        if self.format is not _DEFAULT_FORMAT:  # specs of the default format (json) keep the fingerprint they had
            derives["format"] = [self.format.value, self.encoding.value]
        if self.unavailable_value_placeholder != DEBEZIUM_PLACEHOLDER:  # likewise debezium specs without one
            derives["placeholder"] = self.unavailable_value_placeholder
        if self.decimal_handling is not DecimalHandling.STRING:  # likewise debezium specs without one
            derives["decimal_handling_mode"] = self.decimal_handling.value
        if self.tombstones is not self.facts.default_tombstones:  # likewise specs on their format's rule
            derives["tombstones"] = self.tombstones.value
        if self.max_record_bytes != MAX_RECORD_BYTES:
            derives["max_record_bytes"] = self.max_record_bytes
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
                    **({"string_is_json": True} if c.string_is_json else {}),
                }
                for c in self.columns
            },
            "target_table": self.qualified_target,
            "ordering": {"mode": self.ordering.mode.value, "column": self.ordering.column},
            "format": self.format.value,
            "encoding": self.encoding.value,
            "schema_registry": self.schema_registry,
            **{key: self._as_written(key) for key in self.facts.own_keys},
            "tombstones": self.tombstones.value,
            "batch_size": self.batch_size,
            "max_record_bytes": self.max_record_bytes,
            "max_dead_letter_ratio": self.max_dead_letter_ratio,
            "schedule": self.schedule,
            "min_interval_seconds": self.min_interval_seconds,
            "reconcile": {"cron": self.reconcile_cron, "auto_heal": self.auto_heal},
            "audit": {"cron": self.audit_cron, "auto_heal": self.audit_auto_heal},
            "where": self.where,
            "transform": self.transform.function if self.transform else None,
            "transform_version": self.transform.version if self.transform else None,
            **(
                {"transform_derives": list(self.transform.derives)}
                if self.transform is not None and self.transform.derives is not None
                else {}
            ),
        }

    def _as_written(self, key: str) -> object:
        """The value of the field read from spec key ``key``, as a spec file writes it."""
        return next(_as_written(getattr(self, f.name)) for f in fields(self) if key in file_keys(f))


def file_keys(spec_field: Field[Any]) -> tuple[str, ...]:
    """The spec file's keys a :class:`PipelineSpec` field is read from (none: the file does not set it)."""
    return tuple(spec_field.metadata.get("file_keys", (spec_field.name,)))


def _as_written(value: object) -> object:
    """A default as a spec file (and the JSON Schema) writes it."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Ordering):  # the default orders by offset, which names no column
        return value.mode.value
    return list(value) if isinstance(value, tuple) else value


# Every key a spec file may have.
SPEC_FIELDS: Final = frozenset(key.partition(".")[0] for f in fields(PipelineSpec) for key in file_keys(f))
# The default of each key that one field alone is read from, as a spec file writes it; the keys
# without one are required or default to what other keys say (consumer_group, target_table).
SPEC_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType({
    keys[0]: _as_written(f.default if f.default_factory is MISSING else f.default_factory())
    for f in fields(PipelineSpec)
    if len(keys := file_keys(f)) == 1 and (f.default is not MISSING or f.default_factory is not MISSING)
})  # fmt: skip
