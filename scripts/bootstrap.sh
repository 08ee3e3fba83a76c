#!/usr/bin/env bash
# Create the project venv and install the pinned dependency set from the package registries, then
# fetch the JVM jar sets pinned in devstack/jvm/*/pom.xml from Maven Central (needs mvn and Java 17),
# and generate the Postgres password into the state folder.
# Idempotent: each step does nothing when its stamp matches (the venv's: the two pyproject.toml +
# constraints.txt; each jar set's: its pom.xml).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=.venv
stamp_value=$(cat pyproject.toml devstack/pyproject.toml constraints.txt | sha256sum | cut -c1-16)
stamp_file=$VENV/.installed

# The editable install leaves reprocess.egg-info in the checkout: from a process started here (the
# folder is on sys.path) Airflow would see a second `reprocess` distribution, register the plugin
# entry point twice and report the second as a plugin import error. The venv keeps its own metadata.
rm -rf reprocess.egg-info devstack/reprocess_devstack.egg-info

if [[ ! -f $stamp_file || $(cat "$stamp_file") != "$stamp_value" ]]; then
  command -v "$PYTHON" >/dev/null || { echo "error: $PYTHON not found; install Python 3.11" >&2; exit 1; }
  # 3.11.4 brought tarfile's extraction filters (devstack/jvm unpacks Kafka and Spark with one).
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11, 4))' || {
    echo "error: $PYTHON is $("$PYTHON" -V 2>&1 | cut -d' ' -f2); 3.11.4 or a later 3.11 is needed (PYTHON=... make install)" >&2
    exit 1
  }
  start=$(date +%s)
  [[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "pip==25.3"
  # pyspark ships as a 450 MB sdist the first time; later installs reuse pip's wheel cache. The
  # dev stack is a distribution of its own (devstack/pyproject.toml: `reprocess demo`, `produce`).
  "$VENV/bin/pip" install -q --disable-pip-version-check -c constraints.txt -e ".[dev]" -e "./devstack[local]"
  "$VENV/bin/pip" check
  rm -rf reprocess.egg-info devstack/reprocess_devstack.egg-info
  echo "$stamp_value" > "$stamp_file"
  echo "install: venv done in $(( $(date +%s) - start ))s"
fi
# The jars go to the state folder, as the services' other state does (scripts/env.sh names it).
export REPROCESS_STATE_DIR=${REPROCESS_STATE_DIR:-$PWD/.state}
"$VENV/bin/python" -m devstack.jvm
# The JSON decoder's Jackson UDF, compiled from reprocess/jvm/StrictJson.java into the package
# (build_backend/json_jar.py; the wheel's build backend runs the same).
"$VENV/bin/python" build_backend/json_jar.py
# The generated Postgres password, before anything sources scripts/env.sh: `make services` reads
# env.sh before it starts Postgres, and a URL without the password (a fresh clone) left the Spark
# Connect server's warm-up, which inherits it, failing with "no password supplied".
"$VENV/bin/python" -c "from devstack import postgres; postgres.password()"
