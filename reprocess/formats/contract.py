"""The decoder contract every format keeps, so the stage shape (:mod:`reprocess.spark.transform`)
never depends on the format.

A decoder is a :class:`~reprocess.formats.decoder.Decoder` in a folder of this package, chosen by
the spec's ``format`` (:func:`reprocess.formats.decoder`); its ``decode(records, spec, schemas)``
keeps this contract. It takes Spark's Kafka records
(``key``, ``value``, ``headers``, ``topic``, ``partition``, ``offset``, ``timestamp``) and the
writer schemas the driver fetched for the run (:data:`WriterSchemas`, empty unless the records are
Avro) and returns them with, for the spec's ``i``-th column, its typed value in
:func:`typed_name` ``(i)``; with ``tombstones: delete``, for the ``i``-th key column, the value a
tombstone's Kafka key gives it in :func:`key_name` ``(i)``; :data:`DELETES`, true for a record that
deletes its key (a tombstone; a Debezium ``op: d``); with column ordering and deletes (Debezium),
the ordering column's value of a deleting record in :data:`ORDER_OF_DELETE`; when the spec has
``unchanged_columns`` (Debezium), :data:`~reprocess.core.stage_rows.UNCHANGED`: an array of the
names of the columns the record left out (their typed values NULL, never written), and the links
a left-out value follows: :data:`CREATES` (true for a create: a value left out after it cannot
come from the key's earlier life), :data:`~reprocess.core.stage_rows.OLD_KEY` (a create's old key
when a primary-key change made it) and :data:`~reprocess.core.stage_rows.NEW_KEY` (a delete's new
key, likewise), both as :func:`key_json`, and :data:`~reprocess.core.stage_rows.MOVED_AT` (the
source's commit time of a create or a delete: the key change it belongs to); ``KEEP``
(:data:`KEEP`, the spec's ``where``, through :mod:`reprocess.formats.derive`); and ``_error``: NULL
for a good record or a delete, else the first problem, which makes the record a dead letter.

Nothing raw reaches a text column of the stage unescaped:

- record text a decoder quotes in ``_error`` goes through :func:`escaped_sql` (JSON string escapes:
  no NUL, no control character, valid UTF-8), or through :func:`hex_sql` when it may be binary;
- a text, json, jsonb or array column's value that PostgreSQL cannot store (a NUL character, bytes
  that are not UTF-8, text PostgreSQL's json or jsonb input refuses) is not the decoder's to catch:
  the stage turns it into a dead letter naming the column before the dedupe
  (:func:`unstorable_error_sql`, applied by :func:`reprocess.spark.transform.to_stage`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias

from reprocess.core.column_types import ColumnType

QUOTED_CHARS: Final = 80  # characters of record text an error quotes
QUOTED_BYTES: Final = 40  # bytes of a binary value an error shows in hex

# Avro writer schemas by registry id, per subject: ``{subject: {schema_id: schema_json}}``,
# fetched once per run on the driver (:mod:`reprocess.kafka.registry`), never per record. Each
# subject's last entry is its latest live version: the reader schema every version's records are
# resolved to (:mod:`reprocess.formats.avro_resolution`).
WriterSchemas: TypeAlias = Mapping[str, Mapping[int, str]]

DELETES: Final = "_deletes"
ORDER_OF_DELETE: Final = "_o_delete"
CREATES: Final = "_creates"


def key_json(names: Sequence[str], values: Sequence[str]) -> str:
    """Spark SQL: the JSON text of a key, ``values`` (Spark SQL, typed as the spec's key columns)
    under the key columns' ``names``. A key from a header and a row's own key make the same text
    when they are equal, so the commit can join them as text.

    Examples
    --------
    >>> key_json(["id"], ["_k_0"])
    "to_json(named_struct('id', _k_0))"
    """
    return f"to_json(named_struct({', '.join(f'{sql_string(n)}, {v}' for n, v in zip(names, values, strict=True))}))"


def typed_name(i: int) -> str:
    """The column holding the typed value of the spec's ``i``-th column."""
    return f"_t_{i}"


def key_name(i: int) -> str:
    """The column holding a tombstone's value of the spec's ``i``-th key column."""
    return f"_k_{i}"


def escaped_sql(text: str) -> str:
    """Spark SQL: the first :data:`QUOTED_CHARS` characters of ``text`` with JSON's string escapes
    (``\\u0000`` for NUL, ``\\n``, ``\\"``…), so an error can quote a record's text readably and
    PostgreSQL can store it whatever the record held.

    Examples
    --------
    >>> escaped_sql("_str")
    'substring(to_json(array(left(_str, 80))), 3, length(to_json(array(left(_str, 80)))) - 4)'
    """
    quoted = f"to_json(array(left({text}, {QUOTED_CHARS})))"
    return f"substring({quoted}, 3, length({quoted}) - 4)"


def hex_sql(binary: str) -> str:
    """Spark SQL: ``0x`` and the hex of the first :data:`QUOTED_BYTES` bytes of ``binary`` (a key
    that may be any bytes: a Java ``LongSerializer`` writes 8 of them)."""
    return f"concat('0x', hex(substring({binary}, 1, {QUOTED_BYTES})))"


def storable_sql(text: str) -> str:
    """Spark SQL: ``text`` is NULL or text PostgreSQL can store: valid UTF-8 without a NUL character.
    ``contains``, not ``instr``: ``instr`` compares the needle at every character (8.6% of a 1 M
    record job's CPU in a profile of the JSON decoder), ``contains`` scans for its first byte."""
    return f"({text} IS NULL OR (is_valid_utf8({text}) AND NOT contains({text}, char(0))))"


def unstorable_error_sql(column: str, kind: ColumnType, sql_type: str, text: str) -> str | None:
    """Spark SQL: the dead letter's error for a value of a column of type ``kind`` that
    PostgreSQL's COPY would refuse although its decoder passed it (:func:`unstorable_text_error_sql`,
    :func:`unstorable_value_error_sql`), or None for a type whose staged value the decoders build
    whole (numbers, dates, a ``uuid``'s or a ``bytea``'s canonical text: their type errors come first)."""
    if kind is ColumnType.TEXT:
        return unstorable_text_error_sql(column, text)
    if kind in (ColumnType.JSON, ColumnType.JSONB, ColumnType.TEXT_ARRAY):
        return unstorable_value_error_sql(column, kind, sql_type, text)
    return None


def unstorable_text_error_sql(column: str, text: str) -> str:
    """Spark SQL: the dead letter's error for a text column whose value PostgreSQL cannot store, or
    NULL; it names the column and shows the value's first bytes in hex."""
    what = sql_string(
        f"text error: column {column} holds a NUL character or bytes that are not UTF-8, which PostgreSQL text "
        "cannot store: "
    )
    return f"CASE WHEN NOT {storable_sql(text)} THEN concat({what}, {hex_sql(f'CAST({text} AS BINARY)')}) END"


JSON_TEXT_FUNCTION: Final = "reprocess_json_text"
"""The Java UDF ``(text, jsonb) → NULL or why PostgreSQL's json (jsonb) input refuses the text``
(``reprocess/jvm/JsonText.java``, registered by :func:`reprocess.formats.json_udf.register_json_text`)."""


def unstorable_value_error_sql(column: str, kind: ColumnType, sql_type: str, text: str) -> str:
    """Spark SQL: the dead letter's error for the staged text of a ``json``, ``jsonb`` or array
    column that PostgreSQL's COPY would refuse, or NULL: a NUL character or bytes that are not
    UTF-8 (no PostgreSQL text holds them, an array's element included); for ``json``/``jsonb``
    text its input refuses (:data:`JSON_TEXT_FUNCTION`: not one JSON value; for ``jsonb`` also the
    escape of NUL or a lone surrogate). Checked before the dedupe, so the key's newest record
    PostgreSQL can store lands."""
    what = sql_string(
        f"type error: column {column} holds a NUL character or bytes that are not UTF-8, which PostgreSQL "
        f"{sql_type} cannot store: "
    )
    cases = f"WHEN NOT {storable_sql(text)} THEN concat({what}, {hex_sql(f'CAST({text} AS BINARY)')})"
    if kind in (ColumnType.JSON, ColumnType.JSONB):
        refusal = f"{JSON_TEXT_FUNCTION}({text}, {str(kind is ColumnType.JSONB).lower()})"
        what = sql_string(f"type error: column {column} is not {sql_type}: ")
        cases += f" WHEN {refusal} IS NOT NULL THEN concat({what}, {refusal}, ': ', {escaped_sql(text)})"
    return f"CASE {cases} END"


# PostgreSQL's largest btree index row (BTMaxItemSize on 8 kB pages, btree version 4). A key is
# indexed by the target's and the deletion markers' primary keys; an index row is an 8-byte header
# plus, per key column, a varlena header and alignment (at most 8 bytes) and the value's bytes,
# rounded up to 8. Counting each column at its text's bytes + 8 keeps every key this lets through
# indexable whatever PostgreSQL's compression makes of it (random text does not compress).
BTREE_ROW_LIMIT: Final = 2704


def oversized_key_error_sql(columns: Sequence[tuple[str, str]]) -> str | None:
    """Spark SQL: the dead letter's error for a key too long for PostgreSQL's btree index, or NULL.

    ``columns`` are the key columns' (name, Spark SQL of their value). Without this check such a
    key is staged and then fails the merge (SQLSTATE 54000) on every attempt: one record would
    stop its pipeline for good."""
    if not columns:
        return None
    budget = BTREE_ROW_LIMIT - 16 - 8 * len(columns)
    size = " + ".join(f"coalesce(octet_length(CAST({v} AS STRING)), 0)" for _, v in columns)
    names = ", ".join(name for name, _ in columns)
    what = sql_string(
        f"key error: key ({names}) takes more than {budget} bytes; PostgreSQL's btree index row limit is "
        f"{BTREE_ROW_LIMIT} bytes, so the target cannot index it (SQLSTATE 54000): shorten the key, e.g. key on a "
        "hash of it (an expr such as sha2(...)). The key is "
    )
    return f"CASE WHEN {size} > {budget} THEN concat({what}, ({size}), ' bytes') END"


def sql_string(s: str) -> str:
    """A Spark SQL string literal holding ``s``.

    Examples
    --------
    >>> print(sql_string("it's"))
    'it\\'s'
    """
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


KEEP: str = "_keep"
"""The column holding whether the spec's ``where`` keeps a good record (true without ``where``);
decoders add it with :func:`reprocess.formats.derive.derived_fields`."""
