#!/usr/bin/env bash
# Create the project venv and install the pinned dependency set from the package registries, then
# fetch the JVM jar sets pinned in devstack/jvm/*/pom.xml from Maven Central (needs mvn and Java 17),
# make the bench's Flink venv (bench/flink-requirements.txt)
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
# The Flink peer of `make bench` runs in a venv of its own: apache-flink pins versions the product's
# constraints.txt does not allow (bench/flink-requirements.txt says which). Stamped like the main venv.
FLINK_VENV=$REPROCESS_STATE_DIR/flink-venv
flink_stamp=$(sha256sum bench/flink-requirements.txt | cut -c1-16)
if [[ ! -f $FLINK_VENV/.installed || $(cat "$FLINK_VENV/.installed") != "$flink_stamp" ]]; then
  start=$(date +%s)
  [[ -x $FLINK_VENV/bin/python ]] || "$PYTHON" -m venv "$FLINK_VENV"
  "$FLINK_VENV/bin/python" -m pip install -q --disable-pip-version-check "pip==25.3"
  "$FLINK_VENV/bin/pip" install -q --disable-pip-version-check -r bench/flink-requirements.txt
  echo "$flink_stamp" > "$FLINK_VENV/.installed"
  echo "install: flink venv done in $(( $(date +%s) - start ))s"
fi
# The generated Postgres password, before anything sources scripts/env.sh: `make services` reads
# env.sh before it starts Postgres, and a URL without the password (a fresh clone) left the Spark
# Connect server's warm-up, which inherits it, failing with "no password supplied".
"$VENV/bin/python" -c "from devstack import postgres; postgres.password()"
