"""Exactly-once Kafka → PostgreSQL batch reprocessing, orchestrated by Airflow.

The folders are the layers; each may import only the layers below it (no cycles):

- ``core``: the pipeline spec, ordering, offset ranges, runs, stage row shape and errors. Pure
  Python: no Airflow, Spark, Kafka or Postgres clients.
- ``formats``: one decoder per spec ``format`` (Spark SQL over the Kafka records); imports core.
- ``kafka``: the Kafka clients (one module builds them), the log's offsets, and the records read on
  the driver.
- ``postgres``: the app database: migrations, target and stage tables, the run store, the commit.
- ``spark``: the Spark job: transform, the stage job, the Connect session and spark-submit conf;
  imports core, formats, kafka, postgres.
- ``checks``: reconciliation's checks, one module per kind of gap, and the list they are registered
  in; imports core, postgres.
- ``operations``: what a user asks for: plan, reconcile, rebuild, reset, redrive, mirror,
  coverage, summary; imports core, kafka, postgres, checks.
- ``airflow``: the edge that imports Airflow: the DAGs by kind, the Spark task.
- ``cli``: the command line, an edge like ``airflow``.
- ``spark_apps``, ``sql`` and ``plugins`` are the repository's top-level folders of the same names,
  mapped into the package by the build: spark-submit entry points, the numbered migrations and
  the Airflow plugin (coverage page and run-note listener, an edge like ``airflow``).
"""

__version__ = "0.1.0"
