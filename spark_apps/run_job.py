"""spark-submit entry point for any job: ``spark-submit run_job.py module:function [--name value …]``.

The Spark task (``reprocess.airflow.spark_task``) launches a job through this file when the Spark
connection is a ``spark`` one; over Spark Connect it calls the same function in the task.
Each ``--name value`` becomes the keyword argument ``name`` (dashes become underscores); a
keyword parameter the command line leaves out is read from ``REPROCESS_<NAME>``
(:func:`reprocess.spark.entry_points.secret_env`), so secrets such as the database URL never appear on a
command line.
"""

import sys

from reprocess.spark.entry_points import run_job

if __name__ == "__main__":
    sys.exit(run_job())
