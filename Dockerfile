# Airflow + Spark client image for docker-compose.yml (Java 17 for spark-submit in client mode).
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/reprocess
COPY pyproject.toml constraints.txt README.md ./
COPY reprocess ./reprocess
RUN pip install --no-cache-dir -c constraints.txt -e .
ENV AIRFLOW__CORE__DAGS_FOLDER=/opt/reprocess/dags
