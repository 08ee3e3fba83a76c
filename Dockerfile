# One image for every process of docker-compose.yml: Airflow (api-server, scheduler, dag-processor,
# triggerer, init), the Spark master, worker and Connect server, and the demo producer. The Spark
# driver, its executors and Airflow therefore run the same Python, pyspark and reprocess, version
# for version (constraints.txt). No secrets in here: every password and key is set at run time.

# Stage 1: the reprocess wheel (SQL migrations and the spark-submit entry points inside it), and the
# dev stack's (devstack/pyproject.toml: the demo producer's `reprocess produce`).
FROM python:3.11.14-slim-bookworm AS wheel
# javac: the build compiles the JSON decoder's UDF into the package (build_backend/json_jar.py).
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml MANIFEST.in README.md ./
COPY build_backend ./build_backend
# The folders the build maps into the package (pyproject.toml; devstack/wheel.py SOURCES).
COPY reprocess ./reprocess
COPY spark_apps ./spark_apps
COPY sql ./sql
COPY plugins ./plugins
COPY devstack ./devstack
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist . ./devstack

# Stage 2: Java 17 for Spark, the pinned dependency set, the wheel (not an editable checkout).
FROM python:3.11.14-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
COPY constraints.txt /tmp/constraints.txt
COPY --from=wheel /dist /tmp/dist
RUN pip install --no-cache-dir -c /tmp/constraints.txt /tmp/dist/reprocess-*.whl /tmp/dist/reprocess_devstack-*.whl \
    && rm -rf /tmp/dist /tmp/constraints.txt

# The DAG file and the pipeline specs (compose may bind-mount newer ones); the Airflow plugin and
# provider come with the wheel (entry points), so there is no plugins folder.
WORKDIR /opt/reprocess
COPY dags ./dags
COPY pipelines ./pipelines

# An unprivileged user owns everything a process writes: Airflow's home (logs, the auth file
# volume) and Spark's work and log folders.
RUN useradd --uid 50000 --gid 0 --home-dir /opt/airflow --create-home airflow \
    && mkdir -p /opt/airflow/logs /opt/airflow/auth /opt/spark/work /opt/spark/logs \
    && chown -R 50000:0 /opt/airflow /opt/spark
ENV AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/reprocess/dags \
    AIRFLOW__REPROCESS__PIPELINES_DIR=/opt/reprocess/pipelines \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    SPARK_WORKER_DIR=/opt/spark/work \
    SPARK_LOG_DIR=/opt/spark/logs \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python
USER 50000
