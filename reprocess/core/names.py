"""Every name a pipeline derives, in one place: its DAG ids, run ids and their batches, check ids,
and the tables a run writes besides the target (its stage, a rebuild's shadow and the tables a
swap keeps). Everything that builds or parses such a name calls these; each is an identifier
Postgres or Airflow accepts as it is (table names at most 63 bytes).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

# The DAGs that read a pipeline's data (airflow.factory builds them; reading its coverage needs read
# access to all of them); every generated DAG's id, the reset DAG's too, names the pipeline.
DAG_KINDS: Final = ("backfill", "incremental", "reconcile")
_DAG_ID: Final = re.compile(r"^reprocess_(?P<pipeline>[a-z_][a-z0-9_]*)_(backfill|incremental|reconcile|reset)$")
BATCH_SEPARATOR: Final = "#"


def pipeline_dag_id(pipeline: str, kind: str) -> str:
    """A pipeline's DAG of ``kind`` (backfill, incremental, reconcile, reset).

    >>> pipeline_dag_id("orders", "backfill")
    'reprocess_orders_backfill'
    """
    return f"reprocess_{pipeline}_{kind}"


def broken_spec_dag_id(file_stem: str) -> str:
    """The DAG a spec file that does not load leaves in its pipeline's place (airflow.factory): named
    after the file, since a broken spec may have no name to read; a character a DAG id refuses is ``_``.

    >>> broken_spec_dag_id("orders v2")
    'reprocess_orders_v2_broken'
    """
    return f"reprocess_{re.sub(r'[^A-Za-z0-9_.-]', '_', file_stem)}_broken"


def pipeline_of_dag(dag_id: str) -> str | None:
    """The pipeline a generated DAG belongs to, or None for any other DAG.

    >>> pipeline_of_dag("reprocess_orders_v2_backfill")
    'orders_v2'
    >>> pipeline_of_dag("etl_daily") is None
    True
    """
    match = _DAG_ID.match(dag_id)
    return match.group("pipeline") if match else None


def run_key(dag_id: str, dag_run_id: str) -> str:
    """The run id of a DAG run's run (``reprocess.runs.run_id``): unique across the pipeline's DAGs.

    >>> run_key("reprocess_orders_backfill", "manual__2026-11-01")
    'reprocess_orders_backfill/manual__2026-11-01'
    """
    return f"{dag_id}/{dag_run_id}"


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


def shadow_table(table: str) -> str:
    """A rebuild's shadow of a target table, or of a pipeline's deletion markers."""
    return f"{table[:54]}__rebuild"


def kept_table(table: str, stamp: str) -> str:
    """The name a swap keeps a replaced table under (``stamp``: its UTC time), until the user drops it."""
    return f"{table[:43]}__old_{stamp}"
