#!/usr/bin/env bash
# Runs once, on an empty data volume (/docker-entrypoint-initdb.d): the app database,
# Airflow's metadata database, the Schema Registry's storage and the CDC source database, each
# owned by its own login role. Passwords come from the environment (.env); the app's tables are
# created by reprocess's migrations, not here. The CDC role may replicate (Debezium's slot) and
# owns the source tables it publishes.
set -euo pipefail
: "${REPROCESS_DB_PASSWORD:?set it in .env}" "${AIRFLOW_DB_PASSWORD:?set it in .env}"
: "${REGISTRY_DB_PASSWORD:?set it in .env}" "${CDC_DB_PASSWORD:?set it in .env}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v reprocess_pw="$REPROCESS_DB_PASSWORD" -v airflow_pw="$AIRFLOW_DB_PASSWORD" \
  -v registry_pw="$REGISTRY_DB_PASSWORD" -v cdc_pw="$CDC_DB_PASSWORD" <<'SQL'
CREATE ROLE reprocess LOGIN PASSWORD :'reprocess_pw';
CREATE DATABASE reprocess OWNER reprocess;
CREATE ROLE airflow LOGIN PASSWORD :'airflow_pw';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE registry LOGIN PASSWORD :'registry_pw';
CREATE DATABASE registry OWNER registry;
CREATE ROLE cdc LOGIN REPLICATION PASSWORD :'cdc_pw';
CREATE DATABASE cdc_source OWNER cdc;
SQL
