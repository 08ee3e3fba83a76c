#!/usr/bin/env bash
# Create the project venv and install the pinned dependency set from the package registries.
# Idempotent: does nothing when the venv already matches pyproject.toml + constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=.venv
stamp_value=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
stamp_file=$VENV/.installed

# The editable install leaves reprocess.egg-info in the checkout: from a process started here (the
# folder is on sys.path) Airflow would see a second `reprocess` distribution, register the plugin
# entry point twice and report the second as a plugin import error. The venv keeps its own metadata.
rm -rf reprocess.egg-info

if [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp_value" ]]; then
  exit 0
fi
command -v "$PYTHON" >/dev/null || { echo "error: $PYTHON not found; install Python 3.11" >&2; exit 1; }
start=$(date +%s)
[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "pip==25.3"
# pyspark ships as a 450 MB sdist the first time; later installs reuse pip's wheel cache.
"$VENV/bin/pip" install -q --disable-pip-version-check -c constraints.txt -e ".[local,dev]"
"$VENV/bin/pip" check
rm -rf reprocess.egg-info
echo "$stamp_value" > "$stamp_file"
echo "install: done in $(( $(date +%s) - start ))s"
