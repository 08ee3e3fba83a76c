"""Shared helpers for integration tests: per-test specs and Postgres read-backs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, text

from reprocess.spec import PipelineSpec

ORDERS_SPEC = Path(__file__).resolve().parents[2] / "pipelines" / "orders.yaml"
PAYMENTS_SPEC = ORDERS_SPEC.with_name("payments.yaml")


def orders_spec(name: str, topic: str, base: Path = ORDERS_SPEC, **overrides: Any) -> PipelineSpec:
    """A shipped spec on a test's own topic and target schema, written where the DAG file finds it."""
    raw = yaml.safe_load(base.read_text())
    table = f"{name}.{raw['name']}"
    raw.update({"name": name, "topics": [topic], "consumer_group": f"g-{name}", "target_table": table})
    raw.update(overrides)
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return PipelineSpec.from_file(path)


def target_rows(engine: Engine, spec: PipelineSpec) -> dict[str, tuple[str, str, int, int]]:
    """key → (status, amount, partition, offset), comparable with demo_data.expected_rows."""
    with engine.connect() as conn:
        result = conn.execute(
            text(f"SELECT order_id, status, amount, _kafka_partition, _kafka_offset FROM {spec.qualified_target}")
        )
        return {r[0]: (r[1], str(r[2].normalize()) if r[2] is not None else None, r[3], r[4]) for r in result}


def ledger(engine: Engine, spec: PipelineSpec) -> dict[int, int]:
    with engine.connect() as conn:
        return dict(
            conn.execute(
                text("SELECT partition, next_offset FROM reprocess.consumer_offsets WHERE pipeline = :p"),
                {"p": spec.name},
            ).all()
        )


def dead_letter_count(engine: Engine, spec: PipelineSpec) -> int:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM reprocess.dead_letters WHERE pipeline = :p"), {"p": spec.name}
        ).scalar_one()


def runs(engine: Engine, spec: PipelineSpec) -> list[Any]:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT * FROM reprocess.runs WHERE pipeline = :p ORDER BY created_at"), {"p": spec.name}
        ).all()


def run_dag(spec: PipelineSpec, kind: str, conf: dict[str, Any] | None = None) -> Any:
    """Run a generated DAG with ``dag.test()``: the DAG folder is parsed anew, so it sees the spec."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert bag.import_errors == {}, bag.import_errors
    return bag.dags[spec.dag_id(kind)].test(run_conf=conf)


def start_spark_stage(spec: PipelineSpec, run_id: str, *, batch_size: int | None = None) -> Any:
    """spark-submit spark_apps/read_stage.py as the DAG does, in its own process group (killable)."""
    import json
    import subprocess

    repo = ORDERS_SPEC.parents[1]
    env = {
        **os.environ,
        "REPROCESS_DB_URL": os.environ["AIRFLOW_CONN_REPROCESS_DB"],
        "REPROCESS_KAFKA_CONFIG": json.dumps(json.loads(os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]),
    }
    cmd = ["spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=4", str(repo / "spark_apps" / "read_stage.py"),
           "--spec", spec.source_file, "--run-id", run_id]  # fmt: skip
    if batch_size:
        cmd += ["--batch-size", str(batch_size)]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
