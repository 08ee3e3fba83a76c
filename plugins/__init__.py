"""The Airflow plugin's source (installed as ``reprocess.plugins``): the coverage page of the
reprocessing pipelines, served inside the Airflow UI, and the run-note listener.

``plugin.ReprocessPlugin`` is what the package's ``airflow.plugins`` entry point registers.
``routes.app`` is a FastAPI app that Airflow mounts without authentication of its own, so every
route depends on Airflow's security dependencies (``access.py``). The data comes from
:mod:`reprocess.operations.coverage` (the same queries as ``reprocess status``). Templates and
static files ship as package data. The folder lives at the top of the repository, beside
``spark_apps/`` and ``sql/``, and is mapped into the package the same way (pyproject.toml).
"""
