"""Spark: records → stage rows (``transform``), the stage and window jobs (``job``), the shared
Spark Connect session (``connect``) and the spark-submit conf (``conf``). Imports core, formats,
kafka and postgres; never Airflow (executors do not have it)."""
