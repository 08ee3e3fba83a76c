"""The coverage page of the reprocessing pipelines, served inside the Airflow UI.

``routes.app`` is a FastAPI app that :mod:`reprocess.airflow.plugin` registers; Airflow mounts it
without authentication of its own, so every route depends on Airflow's security dependencies
(``access.py``). The data comes from :mod:`reprocess.operations.coverage` (the same queries as
``cli status``). Templates and static files ship as package data.
"""
