from reprocess.airflow.factory import dags_from_specs

globals().update(dags_from_specs())
