"""The core: pipeline specs, the checks of their SQL (``derive``), the ordering rule, offset
ranges, run requests and plans, a request resolved into ranges (``resolve``), the stage row shape
and the errors. Imports nothing of the other layers, nor Airflow, Spark, Kafka or a database client
(``psycopg2.sql`` only builds quoted identifiers; ``sqlglot`` parses the specs' Spark SQL)."""
