"""Exactly-once Kafka → PostgreSQL batch reprocessing, orchestrated by Airflow."""

__version__ = "0.1.0"
