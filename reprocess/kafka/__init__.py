"""Kafka: the client configs and clients (built in ``clients`` only), the log's and the group's
offsets at a moment and the offsets of a time (``offsets``), the options of Spark's Kafka source
(``spark_source``), a confluent-kafka range reader for checks without Spark (``reader``), and the
demo's producer. Imports core."""
