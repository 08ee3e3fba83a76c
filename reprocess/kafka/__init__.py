"""Kafka: the client configs and clients (built in ``clients`` only), the options of Spark's Kafka
source (``spark_source``), a confluent-kafka range reader for checks without Spark (``reader``),
and the demo's producer. Imports core."""
