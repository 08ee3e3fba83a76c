"""What a spec's format decides about the spec, as the spec parser asks it: :class:`SpecRules`, the
spec-level half of a format's decoder (the whole interface, Spark included, is
:class:`reprocess.formats.decoder.Decoder`; each format implements it in a folder of its own).

Core declares the interface and never an implementation, because core imports nothing of formats:
the parser takes the rules of every format as an argument (:data:`RulesOf`), and callers read specs
through :func:`reprocess.formats.parse_spec` / :func:`reprocess.formats.read_spec`, which pass the
decoders that :mod:`reprocess.formats` registers. Nothing is filled in at import time, so which
decoder answers never depends on what happened to be imported first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple, Protocol

from reprocess.core.column_types import DecimalHandling
from reprocess.core.errors import SpecError
from reprocess.core.formats import Encoding, Format, shared_path
from reprocess.core.ordering import Ordering
from reprocess.core.spec import DEBEZIUM_PLACEHOLDER, ColumnSpec, FormatFacts, TombstoneMode

# ``fail(field, problem)``: the parser's error naming the spec's file and the field.
Fail = Callable[[str, str], SpecError]


class FormatFields(NamedTuple):
    """The spec fields a format's own keys set (a format without a key gets its default here)."""

    encoding: Encoding
    unavailable_value_placeholder: str = DEBEZIUM_PLACEHOLDER
    decimal_handling: DecimalHandling = DecimalHandling.STRING


class SpecRules(Protocol):
    """A format's answers to the spec parser: its own spec keys and their checks, the paths it
    reads beyond the shared ones, its tombstone rule, and what it leaves out of a record."""

    format: Format
    # The spec keys only some formats have that this one reads (``encoding`` for a debezium spec):
    # another format's spec refuses them, naming the formats that have them.
    own_keys: tuple[str, ...]
    default_tombstones: TombstoneMode  # what a tombstone does when the spec does not say
    string_is_json: bool  # whether a json/jsonb column may read a JSON string field as JSON text
    # What this format's own ``$`` paths are, for another format's error ("a part of a Debezium
    # envelope"), and how the path error lists them ("debezium also $op, ..."); None: it has none.
    own_paths: str | None
    own_paths_help: str | None

    def own_path(self, path: str) -> bool:
        """Whether ``path`` is a ``$`` path of this format's records beyond the shared ones."""
        ...

    def fields(self, raw: Mapping[str, Any], fail: Fail) -> FormatFields:
        """The values of this format's own keys in the spec file ``raw`` (checked), defaults else."""
        ...

    def tombstone_problem(
        self, mode: TombstoneMode, ordering: Ordering, paths: Mapping[str, str]
    ) -> tuple[str, str] | None:
        """(field, problem) when ``tombstones: mode`` cannot hold with ``ordering`` (``paths``: each
        column's path), else None."""
        ...

    def unchanged_columns(self, columns: Sequence[ColumnSpec], key: Sequence[str]) -> tuple[str, ...]:
        """The columns a record of this format may leave out (:attr:`PipelineSpec.unchanged_columns`)."""
        ...


# Every format's rules, by name: how the parser reaches all of them without importing one.
RulesOf = Callable[[Format], SpecRules]

# A path that is not one, whatever the format: what the error lists as the paths a column may have.
_PATHS: Final = "must be a dotted path into the value like 'a.b', or one of $key, $key.<path>, $headers.<name>, "


def facts(rules: SpecRules, columns: Sequence[ColumnSpec], key: Sequence[str]) -> FormatFacts:
    """What the spec carries of its format's answers (:class:`~reprocess.core.spec.FormatFacts`)."""
    return FormatFacts(rules.default_tombstones, rules.unchanged_columns(columns, key), rules.own_keys)


def path_problem(path: object, fmt: Format, rules_of: RulesOf) -> str | None:
    """What is wrong with a column's ``path`` under format ``fmt``, or None: a shared path
    (:func:`~reprocess.core.formats.shared_path`) or one of the format's own ``$`` paths is right;
    another format's own path is named as such."""
    if shared_path(path) or (isinstance(path, str) and rules_of(fmt).own_path(path)):
        return None
    others = [rules_of(f) for f in Format if f is not fmt]
    for other in others:
        if isinstance(path, str) and other.own_path(path):
            return f"{path!r} is {other.own_paths}; this pipeline's format is {fmt.value}"
    helps = "; ".join(r.own_paths_help for r in map(rules_of, Format) if r.own_paths_help)
    return f"{_PATHS}$timestamp, $partition, $offset, $topic{f' ({helps})' if helps else ''}, got {path!r}"


def foreign_key_problem(key: str, fmt: Format, rules_of: RulesOf) -> str:
    """The error for a spec key that format ``fmt`` does not have, naming the formats that do."""
    owners = " or ".join(f.value for f in Format if key in rules_of(f).own_keys)
    if key == "encoding":
        return f"only a {owners} pipeline chooses its encoding; format {fmt.value} has one"
    return f"only a {owners} pipeline has one; format {fmt.value}"
