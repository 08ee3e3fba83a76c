"""The JSON decoder's one parse per record: the Jackson UDF (``reprocess/jvm/StrictJson.java``,
``reprocess.json.StrictJson``), its output struct and the roles of the value's fields.

The UDF reads a record's bytes once and gives what ``from_json`` gives (the fields' text, the corrupt
record) plus the strict verdict a second parse gave before (docs/performance.md, "one parse per record
III"). Its jar is inside the package (``reprocess/jvm/reprocess-json.jar``, built by ``make install``
and by the wheel's build backend, build_backend/json_jar.py). A Spark Connect session gets it as an
artifact, once per session, so any Connect server runs it with nothing on its classpath; spark-submit's
driver and executors get it by ``--jars`` (reprocess.spark.conf.dependency_args). A session registers
the UDF under a name per output struct, so specs of different shapes never share one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Final

from reprocess.core.errors import SparkSetupError
from reprocess.core.spec import ColumnSpec, ColumnType, PipelineSpec
from reprocess.formats.contract import JSON_TEXT_FUNCTION, sql_string

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CLASS: Final = "reprocess.json.StrictJson"
ERROR: Final = "_err"
"""The struct's field naming a strict rule the record breaks (``dup``, ``surrogate``, ``after``)."""

JAR: Final = "jvm/reprocess-json.jar"
"""The jar's place in the ``reprocess`` package."""

_ROLES: Final = {
    ColumnType.TEXT: "t",
    ColumnType.NUMERIC: "n",
    ColumnType.JSON: "j",
    ColumnType.JSONB: "j",
    ColumnType.TEXT_ARRAY: "j",  # as written, and its kind: a JSON string holding "[…]" is no array
    ColumnType.BIGINT_ARRAY: "j",
    ColumnType.TIMESTAMPTZ: "z",
    ColumnType.SMALLINT: "h",
    ColumnType.INTEGER: "i",
    ColumnType.BIGINT: "l",
}
_KIND_ROLES: Final = "tnj"
# The roles whose field the UDF also types (its fast slot, ``_f<n>``: FastValues.java), and the slot's type.
_FAST_TYPES: Final = {"n": "boolean", "z": "bigint", "h": "bigint", "i": "bigint", "l": "bigint"}

# A fast slot's value as the column's Spark value (a numeric's slot is a flag, which the decoder reads).
_FAST_VALUES: Final = {
    ColumnType.TIMESTAMPTZ: "timestamp_micros({})",
    ColumnType.SMALLINT: "CAST({} AS SMALLINT)",
    ColumnType.INTEGER: "CAST({} AS INT)",
    ColumnType.BIGINT: "{}",
}


@dataclass(frozen=True)
class Layout:
    """The UDF's output struct (Spark DDL), the roles argument, each typed field's kind slot, and the
    fast slot of each field the UDF types (by path: its slot and the column type it was typed for)."""

    ddl: str
    roles: str
    slots: dict[str, int]
    fast_slots: dict[str, tuple[int, str]] = field(default_factory=dict)

    def kind(self, path: str) -> str:
        """Spark SQL: the kind the UDF gives the field at ``path`` (see the Java class)."""
        return f"_j.`_k{self.slots[path]}`"

    def fast(self, path: str, c: ColumnSpec) -> str | None:
        """Spark SQL: the UDF's typed value of the field at ``path`` for column ``c`` (NULL where the
        UDF left it to the decoder's cast), or None when the UDF does not type it for ``c``'s type."""
        slot = self.fast_slots.get(path)
        if slot is None or slot[1] != _ROLES.get(c.type):
            return None
        return f"_j.`_f{slot[0]}`"

    def typed(self, path: str, c: ColumnSpec, cast: str) -> str:
        """Spark SQL: column ``c``'s typed value of the field at ``path``, the UDF's where it typed
        it, else ``cast`` (Spark evaluates a CASE branch only when it is taken)."""
        fast = self.fast(path, c)
        if fast is None or c.type not in _FAST_VALUES:
            return cast
        return f"CASE WHEN {fast} IS NOT NULL THEN {_FAST_VALUES[c.type].format(fast)} ELSE {cast} END"


def layout(spec: PipelineSpec, schema: str) -> Layout:
    """The layout for ``spec`` whose ``from_json`` schema of strings is ``schema`` (``struct<…>``).

    Examples
    --------
    >>> from reprocess.formats.specs import parse_spec
    >>> spec = parse_spec({"name": "p", "topics": ["t"], "key": ["id"],
    ...     "columns": {"id": "text", "n": {"type": "numeric", "path": "m.n"}, "b": "bigint"}})
    >>> lay = layout(spec, "struct<`id`:string,`m`:struct<`n`:string>,`b`:string,`_corrupt_record`:string>")
    >>> lay.ddl
    'struct<`id`:string,`m`:struct<`n`:string>,`b`:string,`_corrupt_record`:string,`_err`:string,`_k0`:string,`_k1`:string,`_f0`:boolean,`_f1`:bigint>'
    >>> lay.roles, lay.kind("m.n"), lay.fast("b", spec.columns[2])
    ('id=t;m.n=n!;b=l!', '_j.`_k1`', '_j.`_f1`')
    """
    roles: dict[str, str] = {}
    for c in spec.columns:
        if c.from_value and c.expr is None:
            roles.setdefault(c.path, _ROLES.get(c.type, "s"))
    return layout_of(schema, roles)


def layout_of(schema: str, roles: dict[str, str]) -> Layout:
    """The layout for the ``from_json`` schema of strings ``schema`` and the fields' ``roles`` by path
    (``t``, ``n``, ``j``, ``z``, ``h``, ``i``, ``l``; any other field is ``s``; a role of :data:`_FAST_TYPES`
    is sent ending in ``!``, which asks the UDF for the field's fast slot): with no roles, every field is the text
    ``from_json`` gives a string field (the Debezium envelope's, reprocess.formats.debezium).

    Examples
    --------
    >>> lay = layout_of("struct<`op`:string,`after`:struct<`id`:string>,`_corrupt_record`:string>", {})
    >>> lay.ddl, lay.roles
    ('struct<`op`:string,`after`:struct<`id`:string>,`_corrupt_record`:string,`_err`:string>', '')
    """
    slots = {path: k for k, path in enumerate(p for p, role in roles.items() if role in _KIND_ROLES)}
    fast = {path: (k, role) for k, (path, role) in enumerate((p, r) for p, r in roles.items() if r in _FAST_TYPES)}
    extra = f",`{ERROR}`:string" + "".join(f",`_k{k}`:string" for k in range(len(slots)))
    extra += "".join(f",`_f{k}`:{_FAST_TYPES[role]}" for k, role in fast.values())
    text = ";".join(f"{p}={r}{'!' if p in fast else ''}" for p, r in roles.items())
    return Layout(schema[:-1] + extra + ">", text, slots, fast)


def jar_path() -> Path:
    """The UDF's jar inside the installed package; a package without it names the fix.

    Examples
    --------
    >>> jar_path().name
    'reprocess-json.jar'
    """
    jar = Path(str(files("reprocess").joinpath(JAR)))
    if not jar.is_file():
        raise SparkSetupError(
            f"the JSON decoder's jar {jar} is missing: in a checkout run `make install`; else reinstall a "
            "reprocess wheel built where a JDK 17's javac runs (the build compiles reprocess/jvm/StrictJson.java)"
        )
    return jar


# The Spark Connect sessions that hold the jar as an artifact (a session's artifacts are its own).
_SESSIONS_WITH_JAR: set[str] = set()


def _register(spark: SparkSession, name: str, ddl: str, java_class: str = CLASS) -> None:
    """Register the jar's ``java_class`` as ``name`` in ``spark``; a Connect session gets the jar first, once."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    if isinstance(spark, ConnectSession) and spark.session_id not in _SESSIONS_WITH_JAR:
        spark.addArtifacts(str(jar_path()))
        _SESSIONS_WITH_JAR.add(spark.session_id)
    try:
        spark.udf.registerJavaFunction(name, java_class, ddl)
    except Exception as err:
        if java_class not in str(err):
            raise
        raise SparkSetupError(
            f"Spark cannot load the JSON decoder's class {java_class}: start spark-submit with `--jars {jar_path()}` "
            f"(reprocess.spark.conf.spark_submit_command does); Spark said: {str(err)[:300]}"
        ) from err


JSON_TEXT_CLASS: Final = "reprocess.json.JsonText"


def register_json_text(spark: SparkSession) -> None:
    """Register :data:`JSON_TEXT_FUNCTION` in ``spark``: ``reprocess_json_text(text, jsonb)`` is NULL
    when PostgreSQL's json (jsonb) input takes ``text``, else why not (``reprocess/jvm/JsonText.java``;
    :func:`reprocess.formats.contract.unstorable_error_sql` calls it)."""
    _register(spark, JSON_TEXT_FUNCTION, "string", JSON_TEXT_CLASS)


def call_sql(spark: SparkSession, lay: Layout, value: str) -> str:
    """Spark SQL calling the UDF on the bytes column ``value``, registered in ``spark`` first."""
    name = "reprocess_json_" + hashlib.sha256(f"{lay.ddl}\0{lay.roles}".encode()).hexdigest()[:12]
    _register(spark, name, lay.ddl)
    return f"{name}({value}, {sql_string(lay.ddl)}, {sql_string(lay.roles)})"
