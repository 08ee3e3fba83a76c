"""The ``avro`` format's decoder: a Kafka value in the Confluent wire format, read with the writer
schemas the driver fetched from the Schema Registry (:mod:`.decode`; the framing, versions and
resolution it shares with Debezium's Avro encoding are :mod:`reprocess.formats.avro_schema` and
:mod:`reprocess.formats.avro_resolution`). Its values are Avro whatever the spec says (no
``encoding`` key), and how a run reads each writer version is recorded so an apply's plan agrees
(:meth:`AvroDecoder.readings`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprocess.core.formats import Encoding, Format
from reprocess.core.spec import PipelineSpec
from reprocess.formats.avro import decode as _decode
from reprocess.formats.contract import WriterSchemas
from reprocess.formats.decoder import Decoder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class AvroDecoder(Decoder):
    """Avro values in the Confluent wire format, writer schemas from a Schema Registry."""

    format = Format.AVRO
    encoding = Encoding.AVRO

    def decode(self, records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas) -> DataFrame:
        return _decode.decode(records, spec, schemas)

    def readings(self, spec: PipelineSpec, schemas: WriterSchemas) -> dict[str, str] | None:
        """A digest per writer schema id of how the run reads the spec's value fields from it."""
        return _decode.readings(spec, schemas)
