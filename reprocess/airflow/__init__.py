"""The Airflow edge, the only layer that imports Airflow: the DAGs generated from specs (one
module per DAG kind, ``factory`` builds them all), the Spark task (Connect client or
spark-submit). Imports every other layer. The Airflow plugin (coverage page and run-note listener)
is the top-level ``plugins/`` folder, installed as ``reprocess.plugins``."""
