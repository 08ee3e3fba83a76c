"""Transforms in the spec: ``expr:`` per column, ``where:``, and the ``transform:`` function.

Expressions are Spark SQL, checked when the spec loads with ``sqlglot``'s Spark dialect: Spark's
own parser (Catalyst) needs a JVM, which neither the DAG processor nor a Spark Connect client
has, and a spec must fail where Airflow shows import errors, naming the file and the column,
not as a Spark stack trace in a task. The parse also yields the names an expression reads, so
they are resolved here, once, by one rule (:func:`rewrite`): a spec column (its typed value), a
record field (``_kafka_key``, ``_kafka_topic``, ...) or else a field of the decoded value by
dotted path. What only Spark can tell (an unknown function, a type that does not fit) is checked
by the Spark job before it reads anything (``reprocess.spark.transform.checked_stage``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Final

from reprocess.core.errors import SpecError

# The Kafka record's own fields an expression may read, and the Spark column each one is.
RECORD_FIELDS: Final = {
    "_kafka_key": "CAST(key AS STRING)",
    "_kafka_topic": "topic",
    "_kafka_partition": "partition",
    "_kafka_offset": "offset",
    "_kafka_timestamp": "timestamp",
}
_FUNCTION: Final = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")

# Spark functions whose value is not a function of the record: the clock, randomness, the task or
# the session (sqlglot's node classes, and the names it leaves as anonymous calls). A row derived
# from one differs on every run: each replay rewrites it, a plan always shows changes and the value
# check reports a gap its heal cannot close. A window (``OVER``) depends on the batch's records.
_NOT_OF_THE_RECORD: Final = frozenset({
    "CurrentTimestamp", "CurrentTimestampLTZ", "CurrentDate", "CurrentTime", "CurrentDatetime", "Localtimestamp",
    "Localtime", "CurrentTimezone", "Rand", "Randn", "Randstr", "Uniform", "Uuid", "Shuffle", "CurrentUser",
    "SessionUser", "CurrentCatalog", "CurrentDatabase", "CurrentSchema", "Window",
})  # fmt: skip
_ANONYMOUS_NOT_OF_THE_RECORD: Final = frozenset({
    "now", "sysdate", "getdate", "monotonically_increasing_id", "spark_partition_id", "input_file_name",
    "input_file_block_start", "input_file_block_length", "user", "reflect", "java_method", "try_reflect",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Transform:
    """The user's ``DataFrame → DataFrame`` (``package.module:function``) and the version the
    spec declares for it: the code is not hashed (it may live anywhere), so a change of what it
    derives is announced by bumping ``version``, which enters the spec fingerprint."""

    function: str
    version: str
    # The spec columns the function sets (``transform_derives``); None: undeclared, any column. A
    # declared list names neither a key column nor the ordering column (the parser checks), so a
    # change of the function re-derives rows in place, even under column ordering.
    derives: tuple[str, ...] | None = None

    @property
    def module(self) -> str:
        return self.function.partition(":")[0]

    @property
    def attribute(self) -> str:
        return self.function.partition(":")[2]


def parse_transform(
    raw: object, version: object, fail: Callable[[str, str], SpecError], derives: object = None
) -> Transform | None:
    """``transform:``, ``transform_version:`` (both or neither) and the optional ``transform_derives:``
    (checked against the spec's columns by the parser).

    Examples
    --------
    >>> parse_transform("shop.fixes:fix_amounts", 3, lambda f, p: SpecError(p)).module
    'shop.fixes'
    >>> parse_transform("shop.fixes:fix_amounts", 3, lambda f, p: SpecError(p), ["net"]).derives
    ('net',)
    """
    if raw is None:
        for name, value in (("transform_version", version), ("transform_derives", derives)):
            if value is not None:
                raise fail(name, "is only meaningful with 'transform: package.module:function'")
        return None
    if not isinstance(raw, str) or not _FUNCTION.match(raw):
        raise fail("transform", f"must be 'package.module:function' (a DataFrame → DataFrame), got {raw!r}")
    if version is None or isinstance(version, bool) or not isinstance(version, str | int) or str(version) == "":
        raise fail(
            "transform_version",
            f"required with 'transform' (got {version!r}): a version string or number you bump whenever the function "
            "derives different values, so the next backfill re-derives the rows it changes",
        )
    if derives is not None and (
        not isinstance(derives, list) or not derives or not all(isinstance(d, str) for d in derives)
    ):
        raise fail("transform_derives", f"must list the spec columns the function sets, got {derives!r}")
    return Transform(raw, str(version), tuple(derives) if derives is not None else None)


def _parse(text: object, fail: Callable[[str], SpecError]) -> Any:
    """One Spark SQL expression as a sqlglot tree, or the parser's complaint as a SpecError."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, SqlglotError

    if not isinstance(text, str) or not text.strip():
        raise fail("must be a non-empty Spark SQL expression")
    try:
        trees = sqlglot.parse(text, read="spark")
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {"description": str(exc), "col": "?"}
        problem = re.sub(r" for <class '[^']+'>", "", str(first["description"]))
        raise fail(f"not a valid Spark SQL expression: {text!r}: {problem} (at character {first['col']})") from None
    except SqlglotError as exc:
        raise fail(f"not a valid Spark SQL expression: {text!r}: {exc} (an unclosed quote?)") from None
    if (
        len(trees) != 1
        or trees[0] is None
        or isinstance(trees[0], exp.Query | exp.DML | exp.DDL | exp.Command | exp.Alias)
    ):
        raise fail(f"must be ONE expression (no statements, aliases, subqueries or ';'), got {text!r}")
    tree = trees[0]
    if any(isinstance(node, exp.Query | exp.Star) for node in tree.walk()):
        raise fail(f"must not hold a subquery or '*', got {text!r}")
    _refuse_not_of_the_record(tree, text, fail)
    return tree


def _refuse_not_of_the_record(tree: Any, text: str, fail: Callable[[str], SpecError]) -> None:
    """Refuse a call whose value is not a function of the record alone (:data:`_NOT_OF_THE_RECORD`)."""
    from sqlglot import exp

    for node in tree.walk():
        kind = type(node).__name__
        if isinstance(node, exp.Anonymous) and node.name.lower() in _ANONYMOUS_NOT_OF_THE_RECORD:
            name = f"{node.name.lower()}()"
        elif kind in _NOT_OF_THE_RECORD:
            name = "a window (OVER)" if kind == "Window" else f"{node.sql_name().lower()}()"
        else:
            continue
        raise fail(
            f"{text!r} calls {name}, which is not a function of the record: it derives another value on every "
            "run, so each replay would rewrite the rows, every plan would show changes and the value check would "
            "report a gap no heal closes. Derive from the record alone: its Kafka timestamp is _kafka_timestamp "
            "(or a column with path $timestamp); a stable id is a hash of the record's fields (sha2(_kafka_key, 256))"
        )


def _references(tree: Any) -> list[Any]:
    """The column references of an expression, lambda parameters (``x -> x + 1``) left out."""
    from sqlglot import exp

    bound = {p.name for lam in tree.find_all(exp.Lambda) for p in lam.expressions}
    return [c for c in tree.find_all(exp.Column) if not (len(c.parts) == 1 and c.name in bound)]


def references(text: str) -> tuple[tuple[str, ...], ...]:
    """The names an expression reads, each as its dotted parts (lambda parameters left out).

    Examples
    --------
    >>> references("length(notes) + size(filter(tags, t -> t = meta.kind))")
    (('notes',), ('tags',), ('meta', 'kind'))
    """
    return tuple(tuple(p.name for p in ref.parts) for ref in _references(_parse(text, SpecError)))


def value_fields(
    text: object,
    columns: Collection[str],
    fail: Callable[[str], SpecError],
    path_problem: Callable[[str], str | None] | None = None,
) -> tuple[str, ...]:
    """Check an expression; return the dotted paths it reads from the decoded value (the names
    that are neither a spec column nor a record field). ``path_problem`` says what is wrong with
    a path under the spec's format (a ``$`` path in backquotes such as `` `$headers.kind` `` reads a
    record part, :func:`reprocess.core.formats.path_problem`); without it, only dotted paths pass.

    Examples
    --------
    >>> value_fields("amount_cents / 100.0", {"amount"}, SpecError)
    ('amount_cents',)
    >>> value_fields("upper(status) || '-' || meta.region", {"status"}, SpecError)
    ('meta.region',)
    >>> value_fields("amount >", {"amount"}, SpecError)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reprocess.core.errors.SpecError: not a valid Spark SQL expression: 'amount >': ... (at character 8)
    """
    out: list[str] = []
    for ref in _references(_parse(text, fail)):
        parts = [p.name for p in ref.parts]
        if parts[0] in columns or parts[0] in RECORD_FIELDS:
            if len(parts) > 1:
                raise fail(f"{'.'.join(parts)!r}: {parts[0]!r} is a column or record field, not a JSON object")
            continue
        path = ".".join(parts)
        if path_problem is not None:
            problem = path_problem(path)
            if problem is not None:
                raise fail(problem)
        elif not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", path):
            raise fail(f"{path!r} is not a field name or a dotted path like 'a.b'")
        if path not in out:
            out.append(path)
    return tuple(out)


def rewrite(text: str, resolve: Callable[[tuple[str, ...]], str]) -> str:
    """The expression as Spark SQL with every reference replaced by the SQL ``resolve`` gives
    for its parts, so user names never meet the job's own column names.

    Examples
    --------
    >>> rewrite("amount_cents / 100.0 + x", lambda parts: "_t_" + "_".join(parts))
    '_t_amount_cents / 100.0 + _t_x'
    """
    from sqlglot import exp

    tree = _parse(text, SpecError)
    for ref in _references(tree):
        ref.replace(exp.maybe_parse(resolve(tuple(p.name for p in ref.parts)), dialect="spark"))
    return str(tree.sql(dialect="spark"))
