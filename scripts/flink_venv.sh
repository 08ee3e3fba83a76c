#!/usr/bin/env bash
# The Flink peer of `make bench` runs in a venv of its own: apache-flink pins versions the product's
# constraints.txt does not allow (bench/flink-requirements.txt says which). Made by `make bench` only,
# so that an install for the demo or the tests does not pay for it. Stamped like the main venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
REPROCESS_STATE_DIR=${REPROCESS_STATE_DIR:-$PWD/.state}
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
