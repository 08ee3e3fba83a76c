"""Kafka: the client configs and clients (built in ``clients`` only), the range reader, and the
demo's producer. Imports core."""
