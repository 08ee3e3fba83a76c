#!/usr/bin/env bash
# `make test` in parts (tests/conftest.py marks them):
# - the suite on two pytest-xdist workers;
# - beside it, in one process of its own, the `lane` tests (Kafka Connect: a service only they use,
#   which some of them kill), one at a time; in another the `cluster_lane` tests (the standalone
#   cluster, the registry); in a third the `install_lane` test (an Airflow of its own, ~10 min);
#   their output is printed when they end;
# - then the `serial` tests alone (they restart or kill a service every test uses, or the registry).
# Each part writes JUnit XML and its output into $REPROCESS_STATE_DIR/test-reports/ (emptied first).
# When a part fails, scripts/test_report.py prints each failed test's id, the end of its error and
# its services' log lines of the same seconds, and keeps those logs there too.
# Arguments go to every pytest run. REPROCESS_TEST_WORKERS=0 runs the first part in one process.
# REPROCESS_TEST_TIER=all (`make test-all`) adds the long tier (tests/long_tier.txt, marked `long`);
# the default (`make test`) leaves it out.
set -u
tier=" and not long"
[[ ${REPROCESS_TEST_TIER:-fast} == all ]] && tier=""
reports="${REPROCESS_STATE_DIR:-.state}/test-reports"
rm -rf "$reports" && mkdir -p "$reports"
# xunit1: the XML keeps each test's properties (its id, start time and services).
junit=(-o junit_family=xunit1 --junitxml)
python -m pytest -m "lane$tier" --durations=5 "${junit[@]}" "$reports/lane.xml" "$@" >"$reports/lane.out" 2>&1 &
lane_pid=$!
REPROCESS_TEST_LANE=cluster python -m pytest -m "cluster_lane$tier" --durations=5 "${junit[@]}" "$reports/cluster.xml" "$@" \
  >"$reports/cluster.out" 2>&1 &
cluster_pid=$!
REPROCESS_TEST_LANE=install python -m pytest -m "install_lane$tier" --durations=5 "${junit[@]}" "$reports/install.xml" "$@" \
  >"$reports/install.out" 2>&1 &
install_pid=$!
# A crashed worker stops the run (no replacement: a replaced worker can leave the run waiting).
# Files are handed out in collection order, the long ones first (tests/conftest.py LONG_FILES).
python -m pytest -n "${REPROCESS_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --max-worker-restart=0 \
  -m "not serial and not lane and not cluster_lane and not install_lane$tier" --durations=15 "${junit[@]}" "$reports/parallel.xml" "$@" 2>&1 | tee "$reports/parallel.out"
parallel=${PIPESTATUS[0]}
wait "$lane_pid"
lane=$?
wait "$cluster_pid"
cluster=$?
wait "$install_pid"
install=$?
echo "---- the lane tests (run beside the parallel part) ----"
cat "$reports/lane.out"
echo "---- the cluster lane tests (run beside the parallel part) ----"
cat "$reports/cluster.out"
echo "---- the install lane test (run beside the parallel part) ----"
cat "$reports/install.out"
python -m pytest -m "serial$tier" --durations=5 "${junit[@]}" "$reports/serial.xml" "$@" 2>&1 | tee "$reports/serial.out"
serial=${PIPESTATUS[0]}
python scripts/test_report.py "$reports" parallel=$parallel lane=$lane cluster=$cluster install=$install serial=$serial
# 5: no test collected (e.g. PYTEST_ARGS named only tests of another part).
[[ $parallel -eq 5 ]] && parallel=0
[[ $lane -eq 5 ]] && lane=0
[[ $cluster -eq 5 ]] && cluster=0
[[ $install -eq 5 ]] && install=0
[[ $serial -eq 5 ]] && serial=0
echo "make test: parallel part exit $parallel, lane part exit $lane, cluster lane exit $cluster, install lane exit $install, serial part exit $serial"
exit $((parallel || lane || cluster || install || serial))
