"""The interface a format implements: :class:`Decoder`, one subclass per format, each in a folder of
its own (``reprocess/formats/<format>/__init__.py``) and registered once in :mod:`reprocess.formats`.

A decoder answers everything that depends on what a topic's records hold, so nothing outside this
package branches on the spec's ``format``:

- the spec parser (:mod:`reprocess.core.spec_parse`, through :func:`reprocess.formats.specs.parse_spec`):
  the format's own spec keys and their checks, the ``$`` paths it reads beyond the shared ones, its
  tombstone rule, which columns a record may leave out (the spec-level half,
  :class:`reprocess.core.format_rules.SpecRules`, which core declares because core imports nothing of
  formats);
- ``reprocess validate``'s sample: which part of a record's parsed JSON holds the row
  (:meth:`Decoder.sampled_row`);
- the Spark job: the decode itself (:meth:`Decoder.decode`, keeping :mod:`reprocess.formats.contract`),
  the registry subjects whose writer schemas the driver fetches (:meth:`Decoder.subjects`), how a run
  reads each writer version (:meth:`Decoder.readings`), and whether a change out of the ``where``
  deletes its key's row (:meth:`Decoder.removes_filtered`).

The base class holds the answers of a format whose records carry whole values and no spec keys of
their own (``json``); a format overrides what differs. Like pyspark's ``DataSourceReader``, only
:meth:`Decoder.decode` is abstract. Spark is imported inside the methods that run in the job, so the
parser and ``reprocess validate`` can ask a decoder where PySpark is not installed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reprocess.core.format_rules import Fail, FormatFields
from reprocess.core.formats import Encoding, Format
from reprocess.core.ordering import Ordering
from reprocess.core.spec import ColumnSpec, PipelineSpec, TombstoneMode
from reprocess.formats.avro_schema import value_subjects
from reprocess.formats.contract import WriterSchemas

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# A tombstone has no version, so under column ordering it cannot be ordered against the key's rows.
_DELETE_NEEDS_OFFSET = (
    "'delete' needs ordering: offset; this pipeline orders by {column!r}, and a tombstone (null value) has no "
    "version to compare, so an older version could resurrect the key or a newer one be deleted. Order the "
    "pipeline by offset to delete on tombstones, or keep them as dead letters"
)


class Decoder(ABC):
    """What a format decides, from the spec file to the stage (see the module)."""

    format: Format
    own_keys: tuple[str, ...] = ()
    default_tombstones: TombstoneMode = TombstoneMode.DEAD_LETTER
    string_is_json: bool = False
    own_paths: str | None = None
    own_paths_help: str | None = None
    encoding: Encoding = Encoding.JSON  # how its values are serialized, when the spec cannot say

    # The spec parser's questions (reprocess.core.format_rules.SpecRules).

    def own_path(self, path: str) -> bool:
        """Whether ``path`` is a ``$`` path of this format's records beyond the shared ones (none here)."""
        return False

    def fields(self, raw: Mapping[str, Any], fail: Fail) -> FormatFields:
        """The values of this format's own spec keys (none here: its encoding, defaults for the rest)."""
        return FormatFields(self.encoding)

    def tombstone_problem(
        self, mode: TombstoneMode, ordering: Ordering, paths: Mapping[str, str]
    ) -> tuple[str, str] | None:
        """A record's tombstone (null value) is ordered by its offset alone, so ``delete`` needs
        offset ordering."""
        if mode is TombstoneMode.DELETE and ordering.column is not None:
            return "tombstones", _DELETE_NEEDS_OFFSET.format(column=ordering.column)
        return None

    def unchanged_columns(self, columns: Sequence[ColumnSpec], key: Sequence[str]) -> tuple[str, ...]:
        """None: a record carries whole values."""
        return ()

    # ``reprocess validate``'s sample.

    def sampled_row(self, spec: PipelineSpec) -> Callable[[Any], Any] | None:
        """How a sampled record's value, parsed as JSON on the driver, gives the object whose field
        paths the columns name; None when the values are not JSON there (Avro: decoded only in
        Spark, with the registry's writer schemas). Here the value is the row."""
        return None if spec.needs_registry else _whole

    # The Spark job.

    @abstractmethod
    def decode(self, records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas) -> DataFrame:
        """Spark's Kafka records plus the contract's columns (:mod:`reprocess.formats.contract`):
        typed values, tombstone keys, ``_deletes``, ``_keep`` and ``_error``. ``schemas``: the
        writer schemas the driver fetched for the run (empty unless :attr:`PipelineSpec.needs_registry`)."""

    def subjects(self, spec: PipelineSpec) -> list[str]:
        """The registry subjects whose writer schemas a run decodes with, when the spec's records are
        Avro: its values' (``<topic>-value``, the default TopicNameStrategy)."""
        return value_subjects(spec)

    def readings(self, spec: PipelineSpec, schemas: WriterSchemas) -> dict[str, str] | None:
        """How the run reads the spec's fields from each writer schema id (a digest per id), which an
        apply's plan must agree with; None when the format's reading does not depend on the version."""
        return None

    def removes_filtered(self, spec: PipelineSpec) -> bool:
        """Whether a record the spec's ``where`` does not keep deletes its key's row (no: it is
        counted as filtered out and leaves the row alone)."""
        return False


def _whole(doc: Any) -> Any:
    return doc
