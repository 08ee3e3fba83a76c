#!/usr/bin/env bash
# `make test`: the suite on two pytest-xdist workers, then the tests marked `serial` alone (they
# restart or kill a service every test uses; tests/conftest.py). Arguments go to both pytest runs.
# REPROCESS_TEST_WORKERS=0 runs the first part in one process.
set -u
# A crashed worker stops the run (no replacement: a replaced worker can leave the run waiting).
python -m pytest -n "${REPROCESS_TEST_WORKERS:-2}" --dist loadfile --max-worker-restart=0 -m "not serial" \
  --durations=15 "$@"
parallel=$?
python -m pytest -m serial --durations=5 "$@"
serial=$?
# 5: no test collected (e.g. PYTEST_ARGS named only tests of the other part).
[[ $parallel -eq 5 ]] && parallel=0
[[ $serial -eq 5 ]] && serial=0
echo "make test: parallel part exit $parallel, serial part exit $serial"
exit $((parallel || serial))
