"""The project's own error types: each message says what, where and what to do next.

An error also keeps what its message names as attributes, for a caller that acts on it rather
than reads it: the ``pipeline``, the ``run_id``, the ``topic`` and ``partition``, and the
``offsets`` of that partition concerned (a ``range``, end exclusive, as the planned ranges are).
Each is None when the error does not name it.
"""

from __future__ import annotations


class ReprocessError(Exception):
    """Base of every error the pipeline raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        pipeline: str | None = None,
        run_id: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offsets: range | None = None,
    ) -> None:
        super().__init__(message)
        self.pipeline = pipeline
        self.run_id = run_id
        self.topic = topic
        self.partition = partition
        self.offsets = offsets


class SpecError(ReprocessError):
    """A pipeline spec or a run request is invalid; retrying cannot help."""


class SpecSchemaError(SpecError):
    """A spec breaks the spec file's JSON Schema (an unknown key, a wrong type); the message lists every place."""


class SchemaChangeError(SpecError):
    """The spec changed in a way the live target table cannot take in place (type, key, dropped column)."""


class OrderingError(SpecError):
    """A run would compare records the pipeline's ordering cannot order (keys moved partition)."""


class RunStateError(ReprocessError):
    """A run is not in the state the step needs (not planned, not staged, a rebuild asked to commit
    as a plain run); the message names the step to run first."""


class SettingError(ReprocessError):
    """A setting the product needs is not set; the message names it. Retrying cannot help until it is."""


class ConnectionConfigError(SettingError):
    """An Airflow connection (or its ``AIRFLOW_CONN_*`` environment form) is missing or lacks a
    required key; retrying cannot help until it is set."""


class OffsetLookupError(ReprocessError):
    """Kafka could not answer an offset question (unknown topic/partition, timeout)."""


class DataLossError(ReprocessError):
    """A planned range starts below the log start: those records are gone."""


class FencedRunError(ReprocessError):
    """Another run moved the ledger since this run was planned."""


class StageRefusedError(ReprocessError):
    """The commit refused a run's stage (dead letters over the threshold, rows lost); the run is failed."""


class StageLostError(ReprocessError):
    """A run's stage vanished or changed under its job (a PostgreSQL restart empties unlogged
    stages); staging again starts from an empty table."""


class StaleStageTask(ReprocessError):
    """A task attempt of an older job found the stage gone or re-created: nothing was written."""


class CommitInterrupted(ReprocessError):
    """The connection dropped while a commit was in flight: only the database knows whether it
    committed, so the retry reads the run's state there (under the pipeline lock) and answers."""


class ReadError(ReprocessError):
    """The bounded read could not deliver exactly the planned range."""


class ReconciliationGap(ReprocessError):
    """Kafka holds records that the ledger or the target does not account for."""

    def __init__(
        self, message: str, heal_conf: dict[str, object] | None = None, *, pipeline: str | None = None
    ) -> None:
        super().__init__(message, pipeline=pipeline)
        self.heal_conf = heal_conf or {}


class WindowNotStable(ReprocessError):
    """A reconciliation window reaches a last stable offset that an open transaction holds: its
    records above it are not readable yet, so the window can be neither ok nor a gap; check it again
    once the transaction commits or aborts."""


class RegistryError(ReprocessError):
    """The Schema Registry could not be reached or failed to answer; a retry may succeed."""


class SparkConnectError(ReprocessError):
    """The Spark Connect server is unreachable, or it holds another version of this library."""


class SparkSetupError(ReprocessError):
    """The local Spark set-up is incomplete (the jars) or could not be built (the class archive)."""


class QueryResultError(ReprocessError):
    """A query that always returns a row returned none."""


class ProduceError(ReprocessError):
    """Producing records failed: a delivery, or a transaction's commit marker that did not land in time."""


class ServiceError(ReprocessError):
    """A background service (the Spark Connect server, a dev-stack service) could not be started or
    stopped; the message says what to do."""


class StalePlanError(ReprocessError):
    """A plan whose spec, ledger or log changed since it was made: applying it would not do what it showed."""
