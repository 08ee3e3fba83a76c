"""spark-submit entry point: read a planned run's offset ranges from Kafka and stage them.

Usage: spark-submit <reprocess.apps.app_path("read_stage")> --spec pipelines/orders.yaml --run-id RUN_ID
Environment: REPROCESS_DB_URL (app Postgres URL) and REPROCESS_KAFKA_CONFIG (librdkafka JSON).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="pipeline spec YAML")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--batch-size", type=int, default=None, help="max offsets per partition per commit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark.sql import SparkSession

    from reprocess.job import DB_URL_ENV, read_and_stage, register_sources
    from reprocess.spec import PipelineSpec

    spec = PipelineSpec.from_file(args.spec)
    spark = SparkSession.builder.appName(f"reprocess-{spec.name}").getOrCreate()
    try:
        register_sources(spark)
        read_and_stage(
            spark,
            spec,
            args.run_id,
            os.environ[DB_URL_ENV],
            json.loads(os.environ["REPROCESS_KAFKA_CONFIG"]),
            args.batch_size,
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
