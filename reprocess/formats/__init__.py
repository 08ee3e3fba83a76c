"""Formats: one decoder module per spec ``format`` (``json``, ``avro``, ``debezium``), all keeping
the contract in ``contract``; columns from the record's key, headers and metadata are shared
(``record_parts``). Decoders are Spark SQL over Spark's Kafka records (``from_json``,
``from_avro``) and run in the Spark job, never on the Airflow worker; backfill, incremental,
reconciliation, rebuild and redrive all stage through :func:`decoder`. Imports core (and
PySpark, inside functions).

A new format is a module with ``decode(records, spec, schemas)`` (see ``contract``) and a
member of :class:`reprocess.core.spec.Format`.
"""

from __future__ import annotations

from types import ModuleType

from reprocess.core.spec import Format, PipelineSpec


def decoder(spec: PipelineSpec) -> ModuleType:
    """The module that decodes the spec's format."""
    from reprocess.formats import avro, debezium, json

    return {Format.JSON: json, Format.AVRO: avro, Format.DEBEZIUM: debezium}[spec.format]
