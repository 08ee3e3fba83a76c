"""Formats: one decoder module per spec ``format`` (``json`` today), all keeping the contract in
``contract``. Decoders are Spark SQL over Spark's Kafka records and run in the Spark job, never
on the Airflow worker. Imports core (and PySpark, inside functions)."""
