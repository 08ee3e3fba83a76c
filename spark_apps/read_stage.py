"""spark-submit entry point of the stage job: read a planned run's offset ranges and stage them.

Usage: spark-submit <reprocess.spark.entry_points.app_path("read_stage")> --spec pipelines/orders.yaml --run-id RUN_ID
Environment: REPROCESS_DB_URL (app Postgres URL) and REPROCESS_KAFKA_CONFIG (librdkafka JSON).
The same as ``run_job.py reprocess.runner.spark_run:read_job …`` (what the DAG's spark-submit launcher runs).
"""

from __future__ import annotations

import sys

from reprocess.spark.entry_points import run_job

if __name__ == "__main__":
    sys.exit(run_job(["reprocess.runner.spark_run:read_job", *sys.argv[1:]]))
