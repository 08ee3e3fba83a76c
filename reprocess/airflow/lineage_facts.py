"""What the lineage of a run says (:mod:`reprocess.airflow.lineage` reads it, :mod:`reprocess.airflow.lineage_facets`
turns it into OpenLineage datasets and facets): plain values, so neither module imports the other's."""

from __future__ import annotations

from dataclasses import dataclass

from reprocess.core.ranges import OffsetRange


@dataclass(frozen=True)
class RunFacts:
    """What the lineage of a run says, read from Postgres and the connections."""

    run_id: str
    kafka_namespace: str  # kafka://host:port (the first bootstrap server)
    postgres_namespace: str  # postgres://host:port
    table: str  # database.schema.table
    ranges: tuple[OffsetRange, ...]
    committed: bool
    rows_upserted: int
    rows_deleted: int
    dead_letters: int
    records_read: int

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.topic for r in self.ranges))


@dataclass(frozen=True)
class Failure:
    """Why a task failed: ``kind`` is the exception's class name, ``product`` whether it is one of
    the errors reprocess raises on purpose (each says its fix), ``message`` the run's error text."""

    kind: str
    product: bool
    message: str
