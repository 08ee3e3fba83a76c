"""The Airflow edge, the only layer that imports Airflow: the DAGs generated from specs (one
module per DAG kind, ``factory`` builds them all), the Spark task (Connect client or
spark-submit), and the plugin (coverage page and run-note listener). Imports every other layer."""
