"""What the soak measures while it runs and after: each pipeline's lag every few seconds (its
longest), runs by state, and each fault's recovery time (the fault → every pipeline committed a
run that started after it). Reads the product's tables with SQL and the broker with a plain client."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg2

from soak import oracle


@dataclass(eq=False)
class LagMonitor(threading.Thread):
    """Samples every pipeline's lag (records in Kafka not yet committed) until :meth:`stop`."""

    dsn: str
    bootstrap: str
    topics: dict[str, str]  # pipeline → topic
    every_s: float = 10.0
    longest: dict[str, int] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, name="lag", daemon=True)

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def run(self) -> None:
        while not self.stopping.wait(self.every_s):
            self.sample()

    def sample(self) -> dict[str, int] | None:
        """Each pipeline's lag now; None while PostgreSQL or the broker is down."""
        try:
            conn = psycopg2.connect(self.dsn, connect_timeout=5)
        except psycopg2.Error:
            return None
        try:
            now = {p: oracle.lag(conn, self.bootstrap, p, t) for p, t in self.topics.items()}
        except Exception:  # a fault in progress (PostgreSQL or the broker away): skip the sample
            return None
        finally:
            conn.close()
        for p, value in now.items():
            self.longest[p] = max(self.longest.get(p, 0), value)
        return now


def runs_by_state(conn: Any, pipelines: list[str]) -> dict[str, dict[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SELECT pipeline, kind, state, count(*) FROM reprocess.runs WHERE pipeline = ANY(%s) "
                    "GROUP BY 1, 2, 3", (pipelines,))  # fmt: skip
        out: dict[str, dict[str, int]] = {p: {} for p in pipelines}
        for pipeline, kind, state, n in cur.fetchall():
            out[pipeline][f"{kind} {state}"] = int(n)
        return out


def dag_runs_by_state(airflow_conn: Any, dag_ids: list[str]) -> dict[str, dict[str, int]]:
    with airflow_conn.cursor() as cur:
        cur.execute("SELECT dag_id, state, count(*) FROM dag_run WHERE dag_id = ANY(%s) GROUP BY 1, 2", (dag_ids,))
        out: dict[str, dict[str, int]] = {d: {} for d in dag_ids}
        for dag_id, state, n in cur.fetchall():
            out[dag_id][str(state)] = int(n)
        return out


def reconcile_verdicts(conn: Any, pipelines: list[str]) -> dict[str, dict[str, int]]:
    """Every verdict the reconcile runs recorded (one per partition and check, sql/013's history): a
    run that failed shows here why (gap, or not yet stable: the incremental had not read its window)."""
    with conn.cursor() as cur:
        cur.execute("SELECT pipeline, verdict, count(*) FROM reprocess.reconciliation_history "
                    "WHERE pipeline = ANY(%s) GROUP BY 1, 2", (pipelines,))  # fmt: skip
        out: dict[str, dict[str, int]] = {p: {} for p in pipelines}
        for pipeline, verdict, n in cur.fetchall():
            out[pipeline][str(verdict)] = int(n)
        return out


def commits(conn: Any, pipelines: list[str]) -> dict[str, list[tuple[datetime, datetime]]]:
    """Each pipeline's committed runs as (created, committed), oldest first."""
    with conn.cursor() as cur:
        cur.execute("SELECT pipeline, created_at, committed_at FROM reprocess.runs WHERE pipeline = ANY(%s) "
                    "AND state = 'committed' ORDER BY committed_at", (pipelines,))  # fmt: skip
        out: dict[str, list[tuple[datetime, datetime]]] = {p: [] for p in pipelines}
        for pipeline, created, committed in cur.fetchall():
            out[pipeline].append((created, committed))
        return out


def recovery_s(fault_at: datetime, runs: dict[str, list[tuple[datetime, datetime]]]) -> float | None:
    """Seconds from the fault until every pipeline committed a run created after it (None: one never did)."""
    firsts: list[float] = []
    for committed in runs.values():
        after = [c for created, c in committed if created >= fault_at]
        if not after:
            return None
        firsts.append((min(after) - fault_at).total_seconds())
    return max(firsts) if firsts else None


def connect_retrying(dsn: str, attempts: int = 30, wait: Callable[[float], Any] | None = None) -> Any:
    """A connection, retried while PostgreSQL restarts."""
    import time

    for _ in range(attempts - 1):
        try:
            return psycopg2.connect(dsn, connect_timeout=5)
        except psycopg2.Error:
            (wait or time.sleep)(2)
    return psycopg2.connect(dsn, connect_timeout=5)
