"""The ``debezium`` format's decoder: change events as Debezium writes them (:mod:`.decode`), with
the JSON converter or, with ``encoding: avro``, an Avro converter.

What it decides beyond the base :class:`~reprocess.formats.decoder.Decoder`, and why:

- its own spec keys: ``encoding`` (the worker's value converter), ``unavailable_value_placeholder``
  and ``decimal_handling_mode`` (the connector's settings, which the events do not carry);
- the envelope's ``$`` paths (``$op``, ``$ts_ms``, ``$source.<path>``);
- tombstones delete, always: a delete event (``op: d``) carries the source position the pipeline
  orders by, so deletes order as rows do, and an ordering column must be an envelope path (a
  delete has no row to read it from);
- an update may leave an unchanged TOASTed value out (:attr:`PipelineSpec.unchanged_columns`);
- the table mirrors the source rows the ``where`` keeps, so a change out of it deletes the row;
- under Avro, the keys' writer schemas are fetched too (a delete's key may come from the Kafka key).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from reprocess.core.column_types import DecimalHandling
from reprocess.core.format_rules import Fail, FormatFields
from reprocess.core.formats import Encoding, Format
from reprocess.core.ordering import Ordering
from reprocess.core.spec import DEBEZIUM_PLACEHOLDER, ColumnSpec, PipelineSpec, TombstoneMode
from reprocess.formats.contract import WriterSchemas
from reprocess.formats.debezium import decode as _decode
from reprocess.formats.decoder import Decoder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Parts of a Debezium envelope outside the row: the operation, the source block (e.g. the
# PostgreSQL position $source.lsn), the connector's processing time.
_ENVELOPE_PATH: Final = re.compile(r"\$op|\$ts_ms|\$source(\.[A-Za-z_]\w*)+")


class DebeziumDecoder(Decoder):
    """Debezium change events (op, before, after, source), JSON or Avro."""

    format = Format.DEBEZIUM
    own_keys = ("encoding", "unavailable_value_placeholder", "decimal_handling_mode")
    default_tombstones = TombstoneMode.DELETE
    own_paths = "a part of a Debezium envelope"
    own_paths_help = "debezium also $op, $ts_ms, $source.<path>"

    def own_path(self, path: str) -> bool:
        return bool(_ENVELOPE_PATH.fullmatch(path))

    def fields(self, raw: Mapping[str, Any], fail: Fail) -> FormatFields:
        """The converter's encoding and the connector's placeholder and decimal handling."""
        try:
            encoding = Encoding(str(raw.get("encoding", self.encoding)))
        except ValueError:
            raise fail("encoding", f"{raw.get('encoding')!r} is not 'json' or 'avro'") from None
        return FormatFields(encoding, _placeholder(raw, fail), _decimal_handling(raw, fail))

    def tombstone_problem(
        self, mode: TombstoneMode, ordering: Ordering, paths: Mapping[str, str]
    ) -> tuple[str, str] | None:
        """Deletes on ``op: d`` and tombstones, ordered by the event's position: the Kafka tombstone
        after a delete is for compaction only (:mod:`.decode`)."""
        if mode is not TombstoneMode.DELETE:
            return "tombstones", "a debezium pipeline deletes on op d and tombstones: use 'delete'"
        if ordering.column is not None and not paths[ordering.column].startswith("$"):
            return "ordering.column", (
                f"a debezium pipeline's deletes carry no row to read {ordering.column!r} from: order it by offset "
                "(the default, as Debezium's own sinks do; a key's changes stay in order on its partition), or map "
                f"{ordering.column!r} to a commit-ordered envelope path ($...)"
            )
        return None

    def unchanged_columns(self, columns: Sequence[ColumnSpec], key: Sequence[str]) -> tuple[str, ...]:
        """Any non-key column of the row, and any non-key ``expr`` column (it is left out when it
        reads a value the event left out: what it derives from did not change)."""
        return tuple(c.name for c in columns if (c.from_value or c.expr) and c.name not in key)

    def sampled_row(self, spec: PipelineSpec) -> Callable[[Any], Any] | None:
        """The event's row: ``after``, a delete's ``before`` (under ``payload`` with the JSON
        converter's schemas)."""
        return None if spec.needs_registry else _event_row

    def decode(self, records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas) -> DataFrame:
        return _decode.decode(records, spec, schemas)

    def subjects(self, spec: PipelineSpec) -> list[str]:
        """The values' subjects and the keys' (``<topic>-key``): a delete's key columns may come from
        the Kafka key."""
        return super().subjects(spec) + _decode.key_subjects(spec)

    def removes_filtered(self, spec: PipelineSpec) -> bool:
        """A debezium pipeline's table mirrors the source rows that match the ``where``, so a row
        updated out of it leaves."""
        return spec.where is not None


def _event_row(doc: Any) -> Any:
    if not isinstance(doc, dict):
        return doc
    env = doc["payload"] if isinstance(doc.get("payload"), dict) else doc
    return env.get("after") if env.get("op") != "d" else env.get("before")


def _placeholder(raw: Mapping[str, Any], fail: Fail) -> str:
    """The text that marks a value the connector left out (its ``unavailable.value.placeholder``)."""
    if "unavailable_value_placeholder" not in raw:
        return DEBEZIUM_PLACEHOLDER
    value = raw["unavailable_value_placeholder"]
    if not isinstance(value, str) or not value:
        raise fail(
            "unavailable_value_placeholder",
            f"must be the connector's unavailable.value.placeholder text, got {value!r}",
        )
    return value


def _decimal_handling(raw: Mapping[str, Any], fail: Fail) -> DecimalHandling:
    """How the connector writes a numeric (its ``decimal.handling.mode``): under the JSON converter a
    ``precise`` decimal is base64 bytes that cannot be told from a ``string`` one by its text, so the
    spec says which (Avro's schema says it itself)."""
    if "decimal_handling_mode" not in raw:
        return DecimalHandling.STRING
    try:
        return DecimalHandling(str(raw["decimal_handling_mode"]))
    except ValueError:
        raise fail(
            "decimal_handling_mode",
            f"{raw['decimal_handling_mode']!r} is not 'string' (also reads 'double') or 'precise': "
            "copy the connector's decimal.handling.mode",
        ) from None
