"""The project's own error types: each message says what, where and what to do next."""


class ReprocessError(Exception):
    """Base of every error the pipeline raises on purpose."""


class SpecError(ReprocessError):
    """A pipeline spec or a run request is invalid; retrying cannot help."""


class SchemaChangeError(SpecError):
    """The spec changed in a way the live target table cannot take in place (type, key, dropped column)."""


class OffsetLookupError(ReprocessError):
    """Kafka could not answer an offset question (unknown topic/partition, timeout)."""


class DataLossError(ReprocessError):
    """A planned range starts below the log start: those records are gone."""


class FencedRunError(ReprocessError):
    """Another run moved the ledger since this run was planned."""


class StageRefusedError(ReprocessError):
    """The commit refused a run's stage (dead letters over the threshold, rows lost); the run is failed."""


class CommitInterrupted(ReprocessError):
    """The connection dropped while a commit was in flight: only the database knows whether it
    committed, so the retry reads the run's state there (under the pipeline lock) and answers."""


class ReadError(ReprocessError):
    """The bounded read could not deliver exactly the planned range."""


class ReconciliationGap(ReprocessError):
    """Kafka holds records that the ledger or the target does not account for."""

    def __init__(self, message: str, heal_conf: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.heal_conf = heal_conf or {}


class OrderingError(SpecError):
    """A run would compare records the pipeline's ordering cannot order (keys moved partition)."""


class SparkConnectError(ReprocessError):
    """The Spark Connect server is unreachable, or it holds another version of this library."""
