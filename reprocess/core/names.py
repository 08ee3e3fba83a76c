"""Every name a pipeline derives, in one place: its DAG ids, run ids and their batches, check ids,
and the tables a run writes besides the target (its stage, a rebuild's shadow and the tables a
swap keeps). Everything that builds or parses such a name calls these; each is an identifier
Postgres or Airflow accepts as it is (table names at most 63 bytes).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Final

from reprocess.core.runs import RunMode

# The DAGs that read a pipeline's data (airflow.factory builds them; reading its coverage needs read
# access to all of them); every generated DAG's id, the reset DAG's too, names the pipeline.
DAG_KINDS: Final = ("backfill", "incremental", "reconcile", "audit")
_PREFIX: Final = "reprocess_"  # every DAG and Asset the product generates
_DAG_ID: Final = re.compile(rf"^{_PREFIX}(?P<pipeline>[a-z_][a-z0-9_]*)_(?P<kind>{'|'.join((*DAG_KINDS, 'reset'))})$")
BATCH_SEPARATOR: Final = "#"
_STAMP: Final = "%Y%m%dT%H%M%S"  # a time in an id a user types or reads: to the second, UTC


def pipeline_dag_id(pipeline: str, kind: str) -> str:
    """A pipeline's DAG of ``kind`` (backfill, incremental, reconcile, audit, reset).

    >>> pipeline_dag_id("orders", "backfill")
    'reprocess_orders_backfill'
    """
    return f"{_PREFIX}{pipeline}_{kind}"


def broken_spec_dag_id(file_stem: str) -> str:
    """The DAG a spec file that does not load leaves in its pipeline's place (airflow.factory): named
    after the file, since a broken spec may have no name to read; a character a DAG id refuses is ``_``.

    >>> broken_spec_dag_id("orders v2")
    'reprocess_orders_v2_broken'
    """
    return f"{_PREFIX}{re.sub(r'[^A-Za-z0-9_.-]', '_', file_stem)}_broken"


def pipeline_of_dag(dag_id: str) -> str | None:
    """The pipeline a generated DAG belongs to, or None for any other DAG.

    >>> pipeline_of_dag("reprocess_orders_v2_backfill")
    'orders_v2'
    >>> pipeline_of_dag("etl_daily") is None
    True
    """
    match = _DAG_ID.match(dag_id)
    return match.group("pipeline") if match else None


def kind_of_dag(dag_id: str) -> str | None:
    """The kind of a pipeline's generated DAG (backfill, incremental, reconcile, reset), or None.

    >>> kind_of_dag("reprocess_orders_v2_reconcile"), kind_of_dag("reprocess_lag")
    ('reconcile', None)
    """
    match = _DAG_ID.match(dag_id)
    return match.group("kind") if match else None


def is_product_dag(dag_id: str) -> bool:
    """Whether the product generated the DAG: a pipeline's, a broken spec's stand-in, the lag DAG.

    >>> is_product_dag("reprocess_lag"), is_product_dag("etl_daily")
    (True, False)
    """
    return dag_id.startswith(_PREFIX)


def new_records_asset(pipeline: str) -> str:
    """The name of the Asset a pipeline's incremental is scheduled on (and of its watcher).

    >>> new_records_asset("orders")
    'reprocess_orders_new_records'
    """
    return f"{_PREFIX}{pipeline}_new_records"


def run_key(dag_id: str, dag_run_id: str) -> str:
    """The run id of a DAG run's run (``reprocess.runs.run_id``): unique across the pipeline's DAGs.

    >>> run_key("reprocess_orders_backfill", "manual__2026-11-01")
    'reprocess_orders_backfill/manual__2026-11-01'
    """
    return f"{dag_id}/{dag_run_id}"


def local_run_id(pipeline: str, name: str) -> str:
    """The run id of a run started in a process of its own, outside Airflow (a benchmark's):
    ``name`` is unique among the pipeline's such runs.

    >>> local_run_id("orders", "replay")
    'orders/replay'
    """
    return f"{pipeline}/{name}"


def plan_id(pipeline: str, at: datetime, nonce: str) -> str:
    """The id ``reprocess plan`` gives a plan the user did not name: readable, and unique by ``nonce``.

    >>> from datetime import UTC
    >>> plan_id("orders", datetime(2026, 11, 1, 8, tzinfo=UTC), "a1b2c3")
    'plan-orders-20261101T080000-a1b2c3'
    """
    return f"plan-{pipeline}-{at:{_STAMP}}-{nonce}"


def apply_run_id(plan: str, at: datetime) -> str:
    """The run id of ``reprocess apply`` of plan ``plan``: one per second it is applied at.

    >>> from datetime import UTC
    >>> apply_run_id("fix-amounts", datetime(2026, 11, 1, 8, tzinfo=UTC))
    'apply-fix-amounts-20261101T080000'
    """
    return f"apply-{plan}-{at:{_STAMP}}"


def audit_id(pipeline: str, at: datetime, nonce: str) -> str:
    """The id ``reprocess audit`` gives an audit the user did not name (its stage is named by it).

    >>> from datetime import UTC
    >>> audit_id("orders", datetime(2026, 11, 1, 8, tzinfo=UTC), "a1b2c3")
    'audit-orders-20261101T080000-a1b2c3'
    """
    return f"audit-{pipeline}-{at:{_STAMP}}-{nonce}"


def heal_run_id(audit: str) -> str:
    """The run id of the heal of audit ``audit`` (``reprocess audit --heal``, the audit DAG's ``auto_heal``).

    >>> heal_run_id("audit-orders-20261101T080000-a1b2c3")
    'audit-orders-20261101T080000-a1b2c3-heal'
    """
    return f"{audit}-heal"


def reset_run_id(reset_id: int) -> str:
    """The run id a ledger reset writes on the positions it moves (``reprocess.ledger_resets.reset_id``).

    >>> reset_run_id(7)
    'reset:7'
    """
    return f"reset:{reset_id}"


def check_id(dag_id: str, dag_run_id: str, nonce: str) -> str:
    """A reconciliation check's id: one per attempt (``nonce``), so a retried check never reads the
    stage of the attempt before it."""
    return f"{run_key(dag_id, dag_run_id)}/{nonce}"


def child_run_id(run_id: str, k: int) -> str:
    """Batch ``k``'s run id.

    >>> child_run_id("orders-backfill/manual__1", 2)
    'orders-backfill/manual__1#2'
    """
    return f"{run_id}{BATCH_SEPARATOR}{k}"


def parent_run_id(run_id: str) -> str:
    """The run a batch belongs to (a run that is no batch is its own).

    >>> parent_run_id("orders-backfill/manual__1#2"), parent_run_id("orders-backfill/manual__1")
    ('orders-backfill/manual__1', 'orders-backfill/manual__1')
    """
    return run_id.split(BATCH_SEPARATOR, 1)[0]


def stage_table(pipeline: str, stage_id: str) -> str:
    """The stage table of a run, batch or check (in the stage schema): the pipeline's name and a
    digest of the id, since ids hold characters and lengths no identifier may.

    >>> stage_table("orders", "reprocess_orders_backfill/manual__1#0")
    'orders_e1c31c6f676aae8d'
    """
    digest = hashlib.sha1(stage_id.encode()).hexdigest()[:16]
    return f"{pipeline[:40]}_{digest}"


def rebuild_owner(pipeline: str) -> str:
    """The ``pipeline`` value a rebuild's dead letters are kept under until its swap moves them to the
    pipeline: never a pipeline's name (a name holds no ``/``), so an unswapped rebuild leaves the live
    dead letters as they were.

    >>> rebuild_owner("orders")
    'orders/rebuild'
    """
    return f"{pipeline}/{RunMode.REBUILD.value}"


def shadow_table(table: str) -> str:
    """A rebuild's shadow of a target table, or of a pipeline's deletion markers."""
    return f"{table[:54]}__rebuild"


def kept_table(table: str, stamp: str) -> str:
    """The name a swap keeps a replaced table under (``stamp``: its UTC time), until the user drops it."""
    return f"{table[:43]}__old_{stamp}"


def kept_index(index: str, stamp: str) -> str:
    """The name a swap gives an index it leaves on the replaced table, so the new table's index
    takes the old name (a schema's index names are unique)."""
    return f"{index[:40]}__old_{stamp}"
