"""What ``pip install reprocess`` tells Airflow about itself (the ``apache_airflow_provider`` entry point).

Airflow's ProvidersManager calls :func:`get_provider_info` for every installed distribution that
declares the entry point, validates the result against ``airflow/provider_info.schema.json``
(``name`` and ``description`` required) and requires ``package-name`` to equal the
distribution's name; ``airflow providers list`` and the UI's Providers page then show it.

The plugin (coverage page, its nav entry and DAG tab, the run-note listener) is registered
through the ``airflow.plugins`` entry point instead of this info's ``plugins`` list: Airflow
loads provider-declared plugins only when ``[core] lazy_discover_providers`` is off, and then
next to the entry point's, which would register the same plugin twice.

Keep this module import-light: Airflow imports it while discovering providers.
"""

from __future__ import annotations

from typing import Any

from reprocess import __version__

INTEGRATION = "Reprocess (Kafka to PostgreSQL)"


def get_provider_info() -> dict[str, Any]:
    """Provider metadata: name, versions, and the operator module the DAGs are built from."""
    return {
        "package-name": "reprocess",
        "name": "Reprocess",
        "description": "Exactly-once replays of Kafka topics into PostgreSQL through Spark, with DAGs generated "
        "from pipeline specs, a coverage page in the Airflow UI and the `reprocess` command.\n",
        "versions": [__version__],
        "integrations": [
            {"integration-name": INTEGRATION, "tags": ["software"]},
        ],
        "operators": [
            # SparkJobOperator: one job function through Spark Connect or spark-submit.
            {"integration-name": INTEGRATION, "python-modules": ["reprocess.airflow.spark_task"]},
        ],
        "config": {
            # Read by reprocess.airflow.settings; AIRFLOW__REPROCESS__PIPELINES_DIR is its environment form.
            "reprocess": {
                "description": "Settings of the reprocess package.",
                "options": {
                    "pipelines_dir": {
                        "description": "The folder of pipeline specs (*.yaml) that the DAG factory, the "
                        "workers and the `reprocess` command read. No default: set it. The environment "
                        "variable REPROCESS_PIPELINES_DIR overrides it.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/airflow/specs",
                        "default": None,
                    },
                    "spark_log_level": {
                        "description": "The log4j level of the Spark drivers the package starts: a spark-submit "
                        "task (its log) and `reprocess spark-connect start` (the server's log). WARN keeps "
                        "Spark's INFO lines out; INFO or DEBUG brings them back. The environment variable "
                        "REPROCESS_SPARK_LOG_LEVEL overrides it.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "INFO",
                        "default": "WARN",
                    },
                },
            },
        },
    }
