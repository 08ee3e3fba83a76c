"""The ``json`` format's decoder: a Kafka value holding a JSON object (:mod:`.decode`, its strict
parse rules in :mod:`.strict`). It is the base :class:`~reprocess.formats.decoder.Decoder` as it
is (records carry whole values, no spec keys of its own) but for one thing: a json/jsonb column may
read a JSON string field as the JSON text it holds (``string_is_json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprocess.core.formats import Format
from reprocess.core.spec import PipelineSpec
from reprocess.formats.contract import WriterSchemas
from reprocess.formats.decoder import Decoder
from reprocess.formats.json import decode as _decode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class JsonDecoder(Decoder):
    """A JSON object per Kafka value."""

    format = Format.JSON
    # Only JSON itself has a string that may be JSON text: avro and debezium strings always are.
    string_is_json = True

    def decode(self, records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas) -> DataFrame:
        return _decode.decode(records, spec, schemas)
