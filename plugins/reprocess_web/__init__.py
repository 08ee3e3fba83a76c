"""The coverage page of the reprocessing pipelines, served inside the Airflow UI.

``routes.app`` is a FastAPI app that ``plugins/reprocess_plugin.py`` registers; Airflow mounts it
without authentication of its own, so every route depends on Airflow's security dependencies
(``access.py``). The data comes from ``reprocess.coverage`` (the same queries as ``cli status``).
This package is listed in ``plugins/.airflowignore``: Airflow's plugin loader would otherwise
import each of its files as a separate top-level module.
"""
