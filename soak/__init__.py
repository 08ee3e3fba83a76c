"""The soak (``make soak``): the demo's three pipelines on a running ``airflow standalone``, on a
one-minute incremental schedule and their reconciliation, while producers write without pause and a
chaos loop SIGKILLs and restarts the broker, PostgreSQL, the Spark Connect server, the Kafka Connect
worker and the Airflow scheduler. At the end the producers stop, the pipelines catch up, and each
target is checked against an oracle that imports nothing of the product (:mod:`soak.oracle`).
docs/reliability.md holds the figures of a 30-minute run.
"""
