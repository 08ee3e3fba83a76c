"""The embedded services of the demo, the tests and CI (DESIGN §5), as an importable package.

One module per service (``postgres``, ``broker``, ``connect``, ``airflow_ui``), each with
start/stop/health that are idempotent; ``process`` holds what they share (state folder, ports,
pid files, waiting for a port); ``jvm`` pins the Maven jars of the JVM parts (Apache Kafka,
Kafka Connect, Debezium, Spark's Kafka source) and gives each set's classpath. ``scripts/``
are thin command-line wrappers around ``cli`` and ``airflow_ui``; the tests import these
modules instead of running scripts by path. ``demo`` and ``produce`` are the ``reprocess``
commands of the demo (registered through the ``reprocess.commands`` entry point group), and
``airflow_db`` prepares Airflow's metadata DB and ``spark`` pool for them, the UI and the tests.

Every port binds 127.0.0.1. State (data dirs, logs, pid files, the generated database
password) lives in ``$REPROCESS_STATE_DIR`` (default ``.state/`` of the repository).
"""
