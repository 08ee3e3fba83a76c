"""What a topic's records hold (the spec's ``format`` and a Debezium ``encoding``) and which
column paths each format reads; the decoders live in :mod:`reprocess.formats`."""

from __future__ import annotations

import enum
import re
from typing import Final


class Format(enum.StrEnum):
    """What a topic's records hold; one decoder module per format in :mod:`reprocess.formats`."""

    JSON = "json"  # a JSON object per value
    AVRO = "avro"  # Avro in the Confluent wire format, writer schemas from a Schema Registry
    DEBEZIUM = "debezium"  # Debezium change events (op, before, after, source), JSON or Avro


class Encoding(enum.StrEnum):
    """How a Debezium envelope is serialized: the Connect worker's value converter."""

    JSON = "json"  # JsonConverter, with or without schemas.enable (both are read)
    AVRO = "avro"  # an Avro converter in the Confluent wire format, through the registry


# Record parts a column may take instead of a value field, for every format: the Kafka key (its
# text, or a field of it by path), a header's text, and the record's metadata.
_META_PATH: Final = re.compile(r"\$key(\.[A-Za-z_]\w*)*|\$headers\.[!-~]+|\$(timestamp|partition|offset|topic)")
# Parts of a Debezium envelope outside the row: the operation, the source block (e.g. the
# PostgreSQL position $source.lsn), the connector's processing time.
_ENVELOPE_PATH: Final = re.compile(r"\$op|\$ts_ms|\$source(\.[A-Za-z_]\w*)+")
_FIELD_PATH: Final = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def path_problem(path: object, fmt: Format) -> str | None:
    """What is wrong with a column's ``path`` under format ``fmt``, or None.

    Examples
    --------
    >>> path_problem("$source.lsn", Format.DEBEZIUM) is None, path_problem("a.b", Format.JSON) is None
    (True, True)
    >>> path_problem("$source.lsn", Format.AVRO)
    "'$source.lsn' is a part of a Debezium envelope; this pipeline's format is avro"
    """
    if isinstance(path, str) and (_FIELD_PATH.fullmatch(path) or _META_PATH.fullmatch(path)):
        return None
    if isinstance(path, str) and _ENVELOPE_PATH.fullmatch(path):
        if fmt is Format.DEBEZIUM:
            return None
        return f"{path!r} is a part of a Debezium envelope; this pipeline's format is {fmt.value}"
    return (
        "must be a dotted path into the value like 'a.b', or one of $key, $key.<path>, $headers.<name>, "
        f"$timestamp, $partition, $offset, $topic (debezium also $op, $ts_ms, $source.<path>), got {path!r}"
    )
