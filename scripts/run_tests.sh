#!/usr/bin/env bash
# `make test` in three parts (tests/conftest.py marks them):
# - the suite on two pytest-xdist workers;
# - beside it, in one process of its own, the `lane` tests (Kafka Connect, the registry, the
#   standalone cluster: services only they use, some of which they stop), one at a time; its
#   output is printed when it ends;
# - then the `serial` tests alone (they restart or kill a service every test uses).
# Arguments go to every pytest run. REPROCESS_TEST_WORKERS=0 runs the first part in one process.
set -u
lane_log="$(mktemp "${TMPDIR:-/tmp}/reprocess-lane.XXXXXX")"
trap 'rm -f "$lane_log"' EXIT
python -m pytest -m lane --durations=5 "$@" >"$lane_log" 2>&1 &
lane_pid=$!
# A crashed worker stops the run (no replacement: a replaced worker can leave the run waiting).
# Files are handed out in collection order, the long ones first (tests/conftest.py LONG_FILES).
python -m pytest -n "${REPROCESS_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --max-worker-restart=0 \
  -m "not serial and not lane" --durations=15 "$@"
parallel=$?
wait "$lane_pid"
lane=$?
echo "---- the lane tests (run beside the parallel part) ----"
cat "$lane_log"
python -m pytest -m serial --durations=5 "$@"
serial=$?
# 5: no test collected (e.g. PYTEST_ARGS named only tests of another part).
[[ $parallel -eq 5 ]] && parallel=0
[[ $lane -eq 5 ]] && lane=0
[[ $serial -eq 5 ]] && serial=0
echo "make test: parallel part exit $parallel, lane part exit $lane, serial part exit $serial"
exit $((parallel || lane || serial))
