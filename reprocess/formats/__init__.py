"""Formats: what a topic's records hold, one folder per spec ``format`` (``json/``, ``avro/``,
``debezium/``), each a :class:`~reprocess.formats.decoder.Decoder` that answers everything that
depends on the format, from the spec file's keys to the decode in the Spark job. Nothing outside
this package branches on the format: the spec parser, ``reprocess validate``'s sample and the Spark
job ask :func:`decoder`. Imports core (and PySpark, inside the functions that run in the job).

The pieces the formats share: the decoder contract (``contract``: the columns a decode adds),
``typed`` (a field's text → a column's value), ``record_parts`` (``$key``, ``$headers``, metadata),
``derive`` (``expr``/``where`` as Spark SQL), ``avro_schema``/``avro_resolution`` (the Confluent wire
format, for ``avro`` and Debezium's Avro encoding), ``json_udf`` (the JVM JSON parser); and
``specs``, reading spec files with the decoders' rules (:func:`~reprocess.formats.specs.read_spec`).

How to add a format (say ``protobuf``):

1. Name it in :class:`reprocess.core.formats.Format` (the names a spec may give; the JSON Schema
   ``reprocess/core/spec.schema.json`` lists them too).
2. Write ``reprocess/formats/protobuf/__init__.py``: a ``Decoder`` subclass with ``format`` and
   ``decode`` (keeping ``contract``), overriding only what differs from a format whose records carry
   whole values (own spec keys and their checks in ``fields``, own ``$`` paths, tombstone rule,
   registry subjects, ...); the decode itself in ``protobuf/decode.py``, reusing ``json/decode.py``'s
   tombstone, key and column rules as ``avro/`` does.
3. Register it in :func:`decoders` below: the one place that lists the formats (a unit test fails
   while a ``Format`` has no decoder there), and add ``reprocess.formats.protobuf`` to the wheel's
   packages in ``pyproject.toml``.
4. Tests to copy: ``tests/unit/core/test_format_specs.py`` (the spec's rules: its keys, paths and
   tombstones), the format's integration tests (``tests/integration/formats/test_avro_format.py`` and
   ``test_avro_writer_versions.py`` for a registry format, ``test_json_paths_and_json_columns.py``
   and ``test_column_types.py`` otherwise); ``tests/unit/formats/test_format_decoders.py`` checks the
   folder, the registry and the layering for every ``Format`` by itself.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from reprocess.core.format_rules import SpecRules
from reprocess.core.formats import Format
from reprocess.core.spec import PipelineSpec
from reprocess.formats.decoder import Decoder


@functools.cache
def decoders() -> Mapping[Format, Decoder]:
    """Every format's decoder, by name: the one registry of formats. Built on the first call, from
    explicit imports, so it never depends on which module happened to be imported first."""
    from reprocess.formats.avro import AvroDecoder
    from reprocess.formats.debezium import DebeziumDecoder
    from reprocess.formats.json import JsonDecoder

    return {d.format: d for d in (JsonDecoder(), AvroDecoder(), DebeziumDecoder())}


def decoder(spec: PipelineSpec) -> Decoder:
    """The decoder of the spec's format."""
    return decoders()[spec.format]


def rules_of(fmt: Format) -> SpecRules:
    """The spec-level rules of format ``fmt``, as the spec parser asks them (its ``rules_of``)."""
    return decoders()[fmt]
