"""What a topic's records hold (the spec's ``format`` and a Debezium ``encoding``) and the column
paths every format reads; the decoders, and what each format reads beyond these, live in
:mod:`reprocess.formats` (core names the formats, it never branches on one)."""

from __future__ import annotations

import enum
import re
from typing import Final


class Format(enum.StrEnum):
    """What a topic's records hold: the names a spec's ``format`` may take (the JSON Schema lists
    them); each has its decoder in a folder of :mod:`reprocess.formats`, registered there."""

    JSON = "json"  # a JSON object per value
    AVRO = "avro"  # Avro in the Confluent wire format, writer schemas from a Schema Registry
    DEBEZIUM = "debezium"  # Debezium change events (op, before, after, source), JSON or Avro


class Encoding(enum.StrEnum):
    """How a Debezium envelope is serialized: the Connect worker's value converter."""

    JSON = "json"  # JsonConverter, with or without schemas.enable (both are read)
    AVRO = "avro"  # an Avro converter in the Confluent wire format, through the registry


# Record parts a column may take instead of a value field, for every format: the Kafka key (its
# text, or a field of it by path), a header's text, and the record's metadata. A format may read
# `$` paths of its own besides (a Debezium envelope's: its decoder's ``own_path``).
_META_PATH: Final = re.compile(r"\$key(\.[A-Za-z_]\w*)*|\$headers\.[!-~]+|\$(timestamp|partition|offset|topic)")
_FIELD_PATH: Final = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def shared_path(path: object) -> bool:
    """Whether ``path`` is a column path every format reads: a dotted path into the value, or a
    record part (``$key``, ``$key.<path>``, ``$headers.<name>``, ``$timestamp``, ``$partition``,
    ``$offset``, ``$topic``).

    Examples
    --------
    >>> shared_path("a.b"), shared_path("$headers.src"), shared_path("$source.lsn"), shared_path(3)
    (True, True, False, False)
    """
    return isinstance(path, str) and bool(_FIELD_PATH.fullmatch(path) or _META_PATH.fullmatch(path))
