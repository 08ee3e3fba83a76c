"""Reading a pipeline spec: a spec file's YAML mapping into a :class:`PipelineSpec`, the format-neutral
part; what the spec's format decides (its own keys, paths, tombstone rule) the format's decoder answers
through ``rules_of`` (:mod:`reprocess.core.format_rules`). Callers read specs through
:func:`reprocess.formats.specs.parse_spec` and :func:`~reprocess.formats.specs.read_spec`, which pass
the registered decoders.

Every problem raises :class:`SpecError` naming the file and the field. A spec is first checked
against the JSON Schema (:mod:`reprocess.core.spec_schema`: every key at every level, every type),
then against the rules a schema cannot say; ``reprocess validate`` and the DAG factory both come
here, so they cannot disagree. The keys a file may have and their defaults come from the model
(:data:`reprocess.core.spec.SPEC_FIELDS`, :data:`reprocess.core.spec.SPEC_DEFAULTS`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping
from difflib import get_close_matches
from typing import Any, Final

from reprocess.core.column_types import ColumnType, parse_type
from reprocess.core.derive import parse_transform, value_fields
from reprocess.core.errors import SpecError, SpecSchemaError
from reprocess.core.format_rules import FormatFields, RulesOf, SpecRules, facts, foreign_key_problem, path_problem
from reprocess.core.formats import Format
from reprocess.core.ordering import Ordering
from reprocess.core.spec import ON_NEW_RECORDS, SPEC_DEFAULTS, SPEC_FIELDS, ColumnSpec, PipelineSpec, TombstoneMode
from reprocess.core.spec_schema import schema_problems

# The bookkeeping schemas (runs and ledger, stages, deletion markers): never a pipeline's target.
RESERVED_SCHEMAS: Final = frozenset({"reprocess", "reprocess_stage", "reprocess_deleted"})
# Airflow 3's schedule presets (airflow.timetables: cron presets, @once and @continuous).
CRON_PRESETS: Final = frozenset(
    {"@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly"}
)
_IDENT: Final = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# Issue 36: a change event leaves unchanged TOASTed values out, and the commit resolves them in
# PostgreSQL after Spark ran (reprocess.postgres.left_out): a transform would see NULL there.
_LEFT_OUT_TRANSFORM: Final = (
    "a debezium pipeline cannot have a transform over columns a change event may leave out ({columns}): "
    "Debezium leaves an unchanged large (TOASTed) value out of an update, and reprocess resolves it from the "
    "stored row at the commit, after Spark ran the function, so the function would get NULL there and the row "
    "would keep what it derived from NULL. Derive with `expr` columns and `where` instead (they follow "
    "left-out values: docs/formats/debezium.md), or stream the table with REPLICA IDENTITY FULL through Debezium's "
    "ExtractNewRecordState as a `format: json` pipeline, whose records carry every value"
)

# A function declared to set the key or the ordering column gains nothing from the declaration.
_DERIVES_KEY_OR_ORDER: Final = (
    "lists {name!r}, {role}: a function that sets it cannot re-derive rows in place (a changed key leaves the "
    "old key's row behind; stored rows hold ordering values the old function gave, which a new one's could not be "
    "compared with), and declaring what the function sets is how a changed function avoids a rebuild. If the "
    "function does not set {name!r}, remove it from the list; if it does, leave transform_derives out (then, under "
    "column ordering, a change of the function needs mode=rebuild)"
)


def parse_spec(raw: object, rules_of: RulesOf, source: str = "<spec>") -> PipelineSpec:
    """The spec a YAML mapping declares, its format's part answered by ``rules_of`` (every format's
    rules, by name); ``source`` names it in the errors (the file's path).

    A spec must pass both the schema and the parser's rules: a misspelt ``requried`` inside a
    column, which the parser alone never looked at, is refused with the schema's words and fix.
    Where the parser refuses too, its own message (one field, its fix) comes first."""
    problems = schema_problems(raw)
    if not problems:
        return _SpecParser(source, rules_of).parse(raw)
    listed = "; ".join(map(str, problems))
    try:
        _SpecParser(source, rules_of).parse(raw)
    except SpecError as exc:  # its own words first (one field, its fix), then every place the schema names
        raise SpecSchemaError(f"{exc}; and against the spec schema: {listed}", pipeline=exc.pipeline) from None
    except Exception:  # a shape the parser does not expect: the schema says what is wrong
        pass
    raise SpecSchemaError(f"{source}: against the spec schema: {listed}")


class _SpecParser:
    """Turns a YAML mapping into a spec; each error names the file and the field."""

    def __init__(self, source: str, rules_of: RulesOf) -> None:
        self.source = source
        self.rules_of = rules_of
        self.paths: dict[str, str] = {}

    def fail(self, field_name: str, problem: str) -> SpecError:
        return SpecError(f"{self.source}: field '{field_name}': {problem}")

    def ident(self, value: object, field_name: str) -> str:
        if not isinstance(value, str) or not _IDENT.match(value):
            raise self.fail(field_name, f"{value!r} is not a lowercase SQL identifier ([a-z_][a-z0-9_]*)")
        return value

    def cron(self, value: object, field_name: str, what: str) -> str:
        """A schedule Airflow takes: a preset or a five-field cron. Checked here, not left to the DAG:
        Airflow's refusal at DAG construction would be an import error hiding every pipeline of the folder."""
        from croniter import croniter  # type: ignore[import-untyped]

        if isinstance(value, str) and (value in CRON_PRESETS or (len(value.split()) == 5 and croniter.is_valid(value))):
            return value
        presets = ", ".join(sorted(CRON_PRESETS))
        raise self.fail(
            field_name, f"must be {what}, got {value!r}; write five cron fields (e.g. '0 3 * * *') or one of {presets}"
        )

    def positive_int(self, raw: Mapping[str, Any], name: str) -> int:
        value = raw.get(name, SPEC_DEFAULTS[name])
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(name, f"must be a positive integer, got {value!r}")
        return value

    def parse(self, raw: object) -> PipelineSpec:
        if not isinstance(raw, Mapping):
            raise SpecError(f"{self.source}: a pipeline spec must be a mapping, got {type(raw).__name__}")
        unknown = sorted(map(str, set(raw) - SPEC_FIELDS))
        if unknown:
            raise self.fail(unknown[0], f"unknown field (allowed: {', '.join(sorted(SPEC_FIELDS))})")
        rules, own = self.format(raw)
        fmt = rules.format
        name = self.ident(raw.get("name"), "name")
        topics = raw.get("topics")
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
            raise self.fail("topics", f"must be a non-empty list of topic names, got {topics!r}")
        columns = self.columns(raw.get("columns"), rules)
        self.paths = {c.name: c.path for c in columns}
        names = {c.name for c in columns}
        key = raw.get("key")
        if isinstance(key, str):
            key = [key]
        if not isinstance(key, list) or not key or not all(k in names for k in key):
            raise self.fail("key", f"must list one or more of the columns {sorted(names)}, got {key!r}")
        columns = tuple(c.with_required() if c.name in key else c for c in columns)
        ordering = Ordering.parse(
            raw.get("ordering", SPEC_DEFAULTS["ordering"]),
            required={c.name: c.required for c in columns},
            types={c.name: (c.type, c.numeric) for c in columns},
            topics=topics,
            fail=self.fail,
        )
        schema, _, table = str(raw.get("target_table", f"public.{name}")).rpartition(".")
        if schema in RESERVED_SCHEMAS:
            raise self.fail("target_table", f"schema {schema!r} holds the pipelines' bookkeeping; use another schema")
        ratio = raw.get("max_dead_letter_ratio", SPEC_DEFAULTS["max_dead_letter_ratio"])
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise self.fail("max_dead_letter_ratio", f"must be a number in [0, 1], got {ratio!r}")
        reconcile = raw.get("reconcile", {}) or {}
        if not isinstance(reconcile, Mapping):
            raise self.fail("reconcile", "must be a mapping with 'cron' and 'auto_heal'")
        audit = raw.get("audit", {}) or {}
        if not isinstance(audit, Mapping):
            raise self.fail("audit", "must be a mapping with 'cron' and 'auto_heal'")
        group = raw.get("consumer_group", f"reprocess-{name}")
        if not isinstance(group, str) or not group:
            raise self.fail("consumer_group", f"must be a non-empty string, got {group!r}")
        schedule = raw.get("schedule")
        if schedule is not None and schedule != ON_NEW_RECORDS:
            self.cron(schedule, "schedule", f"a cron string, a preset like '@hourly' or {ON_NEW_RECORDS!r}")
        if "min_interval_seconds" in raw and schedule != ON_NEW_RECORDS:
            raise self.fail("min_interval_seconds", f"applies to `schedule: {ON_NEW_RECORDS}` only; remove it")
        tombstones = self.tombstones(raw.get("tombstones", rules.default_tombstones), ordering, rules)
        where, fields = self.derivations(
            columns, raw.get("where"), key if tombstones is TombstoneMode.DELETE else (), fmt
        )
        spec = PipelineSpec(
            name=name,
            topics=tuple(topics),
            consumer_group=group,
            key=tuple(key),
            columns=columns,
            target_schema=self.ident(schema or "public", "target_table"),
            target_table=self.ident(table, "target_table"),
            ordering=ordering,
            format=fmt,
            encoding=own.encoding,
            schema_registry=self.registry(raw),
            unavailable_value_placeholder=own.unavailable_value_placeholder,
            decimal_handling=own.decimal_handling,
            tombstones=tombstones,
            batch_size=self.positive_int(raw, "batch_size"),
            max_record_bytes=self.positive_int(raw, "max_record_bytes"),
            max_dead_letter_ratio=float(ratio),
            schedule=schedule,
            min_interval_seconds=self.positive_int(raw, "min_interval_seconds"),
            reconcile_cron=self.cron(
                reconcile.get("cron", SPEC_DEFAULTS["reconcile.cron"]), "reconcile.cron", "a cron string or a preset"
            ),
            auto_heal=bool(reconcile.get("auto_heal", SPEC_DEFAULTS["reconcile.auto_heal"])),
            audit_cron=self.cron(
                audit.get("cron", SPEC_DEFAULTS["audit.cron"]), "audit.cron", "a cron string or a preset"
            ),
            audit_auto_heal=bool(audit.get("auto_heal", SPEC_DEFAULTS["audit.auto_heal"])),
            owner=str(raw.get("owner", SPEC_DEFAULTS["owner"])),
            description=str(raw.get("description") or SPEC_DEFAULTS["description"]).strip(),
            source_file=self.source,
            tags=self.tags(raw.get("tags")),
            where=where,
            transform=parse_transform(
                raw.get("transform"), raw.get("transform_version"), self.fail, raw.get("transform_derives")
            ),
            value_fields=fields,
            facts=facts(rules, columns, key),
        )
        if spec.transform is not None and spec.unchanged_columns:
            raise self.fail("transform", _LEFT_OUT_TRANSFORM.format(columns=list(spec.unchanged_columns)))
        self.transform_derives(spec)
        return spec

    def transform_derives(self, spec: PipelineSpec) -> None:
        """``transform_derives`` names spec columns, and neither a key column nor the ordering column:
        the declaration is what lets a changed function re-derive rows in place (the key says which
        row a record updates, the ordering column whether it is newer than the stored one)."""
        derives = spec.transform.derives if spec.transform is not None else None
        names = [c.name for c in spec.columns]
        for name in derives or ():
            if name not in names:
                close = get_close_matches(name, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.fail("transform_derives", f"{name!r} is not a column of the spec ({names}){hint}")
            role = "a key column" if name in spec.key else "the ordering column" if name == spec.ordering.column else ""
            if role:
                raise self.fail("transform_derives", _DERIVES_KEY_OR_ORDER.format(name=name, role=role))

    def derivations(
        self, columns: tuple[ColumnSpec, ...], where: object, tombstone_key: Collection[str], fmt: Format
    ) -> tuple[str | None, tuple[str, ...]]:
        """Check every ``expr`` and the ``where`` predicate (core.derive); returns the predicate and
        the value paths they read. An expression reads path-mapped columns, not other expressions
        (one evaluation step); a tombstone has no value, so its key columns cannot be derived."""
        plain = {c.name for c in columns if c.expr is None}
        check = functools.partial(path_problem, fmt=fmt, rules_of=self.rules_of)
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

    def format(self, raw: Mapping[str, Any]) -> tuple[SpecRules, FormatFields]:
        """The rules of the spec's format and the values of its own keys; a key another format owns
        is refused, naming the formats that have it."""
        try:
            fmt = Format(str(raw.get("format", SPEC_DEFAULTS["format"])))
        except ValueError:
            allowed = ", ".join(f.value for f in Format)
            raise self.fail("format", f"{raw.get('format')!r} is not one of: {allowed}") from None
        rules = self.rules_of(fmt)
        owned = dict.fromkeys(key for f in Format for key in self.rules_of(f).own_keys)
        for key in owned:
            if key in raw and key not in rules.own_keys:
                raise self.fail(key, foreign_key_problem(key, fmt, self.rules_of))
        return rules, rules.fields(raw, self.fail)

    def registry(self, raw: Mapping[str, Any]) -> str:
        conn_id = raw.get("schema_registry", SPEC_DEFAULTS["schema_registry"])
        if not isinstance(conn_id, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", conn_id):
            raise self.fail("schema_registry", f"must name an Airflow connection, got {conn_id!r}")
        return conn_id

    def tombstones(self, raw: object, ordering: Ordering, rules: SpecRules) -> TombstoneMode:
        """A tombstone has no payload, so it carries no version: it can only be ordered by its
        place in its partition's log. Under column ordering that place says nothing about the
        versions on other partitions, so ``delete`` needs offset ordering, unless the format's
        deletes carry their position (a Debezium ``op: d``): the format's rules say
        (:meth:`~reprocess.core.format_rules.SpecRules.tombstone_problem`)."""
        try:
            mode = TombstoneMode(str(raw))
        except ValueError:
            raise self.fail("tombstones", f"{raw!r} is not 'dead_letter' or 'delete'") from None
        problem = rules.tombstone_problem(mode, ordering, self.paths)
        if problem is not None:
            raise self.fail(*problem)
        return mode

    def tags(self, raw: object) -> tuple[str, ...]:
        if raw is None:
            return ()
        if isinstance(raw, str):
            return (raw,)
        if not isinstance(raw, list):
            raise self.fail("tags", f"must be a list of strings, got {raw!r}")
        return tuple(str(t) for t in raw)

    def columns(self, raw: object, rules: SpecRules) -> tuple[ColumnSpec, ...]:
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
            path = self.path(col.get("path", col_name), f"{where}.path", rules.format)
            string_is_json = bool(col.get("string_is_json", False))
            if string_is_json and (not rules.string_is_json or col_type not in (ColumnType.JSON, ColumnType.JSONB)):
                raise self.fail(
                    f"{where}.string_is_json",
                    "only a json or jsonb column of the json format reads a JSON string as JSON text (avro and "
                    "debezium strings always are JSON text)",
                )
            required = bool(col.get("required", False))
            out.append(ColumnSpec(col_name, col_type, path, required, expr, numeric, string_is_json))
        return tuple(out)

    def path(self, path: object, where: str, fmt: Format) -> str:
        problem = path_problem(path, fmt, self.rules_of)
        if problem is not None:
            raise self.fail(where, problem)
        return str(path)
