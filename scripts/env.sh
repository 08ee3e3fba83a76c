# Source me: sets PATH, AIRFLOW_HOME and the connections for the embedded services.
# Secrets (the generated Postgres password) come from the git-ignored state folder.
_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPROCESS_HOME="$_repo"
export REPROCESS_STATE_DIR="${REPROCESS_STATE_DIR:-$_repo/.state}"
export REPROCESS_PG_PORT="${REPROCESS_PG_PORT:-55433}"
export REPROCESS_KAFKA_PORT="${REPROCESS_KAFKA_PORT:-19092}"
export REPROCESS_CONNECT_PORT="${REPROCESS_CONNECT_PORT:-15102}"
export REPROCESS_SPARK_MASTER_PORT="${REPROCESS_SPARK_MASTER_PORT:-17077}"
# On demand (tests, `make demo`): the Kafka Connect worker's REST API and Apicurio Registry.
export REPROCESS_KAFKA_CONNECT_PORT="${REPROCESS_KAFKA_CONNECT_PORT:-18083}"
export REPROCESS_REGISTRY_PORT="${REPROCESS_REGISTRY_PORT:-18090}"
export PATH="$_repo/.venv/bin:$PATH"

export AIRFLOW_HOME="${AIRFLOW_HOME:-$REPROCESS_STATE_DIR/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$_repo/dags"
# The folder of pipeline specs (Airflow option [reprocess] pipelines_dir): the checkout's own. An
# installed package has no default; REPROCESS_PIPELINES_DIR (the tests' folders) overrides it.
export AIRFLOW__REPROCESS__PIPELINES_DIR="$_repo/pipelines"
# No plugins folder: the installed package registers its plugin (entry point airflow.plugins).
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False

_pgpw="$(cat "$REPROCESS_STATE_DIR/pg/password" 2>/dev/null || true)"
_pg="reprocess:${_pgpw}@127.0.0.1:${REPROCESS_PG_PORT}"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://${_pg}/${REPROCESS_AIRFLOW_DB:-airflow}"
export AIRFLOW_CONN_REPROCESS_DB="postgresql://${_pg}/${REPROCESS_APP_DB:-reprocess}"
# Avro pipelines' Schema Registry: Apicurio's Confluent-compatible API (devstack/registry.py).
export AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT="{\"conn_type\":\"http\",\"host\":\"http://127.0.0.1:${REPROCESS_REGISTRY_PORT}/apis/ccompat/v7\"}"
export AIRFLOW_CONN_KAFKA_DEFAULT="{\"conn_type\":\"kafka\",\"extra\":{\"bootstrap.servers\":\"127.0.0.1:${REPROCESS_KAFKA_PORT}\"}}"
# The warm Spark Connect server of `make services` (devstack/connect.py). For spark-submit on
# local[2,4] instead: AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[2,4]"}'.
export AIRFLOW_CONN_SPARK_DEFAULT="{\"conn_type\":\"spark_connect\",\"host\":\"127.0.0.1\",\"port\":${REPROCESS_CONNECT_PORT}}"

# Spark: loopback only, the venv's Python on the executors, and the machine's Java 17.
export SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$_repo/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$_repo/.venv/bin/python"
# Spark's Kafka source for spark-submit (--jars; reprocess/spark/conf.py): the jar set make install
# fetched. Set it empty to have spark-submit resolve the Maven coordinates (--packages) instead.
export REPROCESS_SPARK_JARS="${REPROCESS_SPARK_JARS-$REPROCESS_STATE_DIR/jvm/jars/spark}"
# JVM class archive that halves the driver's start-up (reprocess/spark/conf.py; built by services.py).
export REPROCESS_SPARK_CLASS_ARCHIVE="${REPROCESS_SPARK_CLASS_ARCHIVE:-$REPROCESS_STATE_DIR/jvm/spark-classes.jsa}"
if [[ -z "${JAVA_HOME:-}" ]] && command -v java >/dev/null; then
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
  export JAVA_HOME
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$REPROCESS_STATE_DIR/run}"
mkdir -p -m 700 "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
unset _repo _pgpw _pg
