#!/usr/bin/env bash
# Runs once, on an empty data volume (/docker-entrypoint-initdb.d): the app database and
# Airflow's metadata database, each owned by its own login role. Passwords come from the
# environment (.env); the app's tables are created by reprocess's migrations, not here.
set -euo pipefail
: "${REPROCESS_DB_PASSWORD:?set it in .env}" "${AIRFLOW_DB_PASSWORD:?set it in .env}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v reprocess_pw="$REPROCESS_DB_PASSWORD" -v airflow_pw="$AIRFLOW_DB_PASSWORD" <<'SQL'
CREATE ROLE reprocess LOGIN PASSWORD :'reprocess_pw';
CREATE DATABASE reprocess OWNER reprocess;
CREATE ROLE airflow LOGIN PASSWORD :'airflow_pw';
CREATE DATABASE airflow OWNER airflow;
SQL
