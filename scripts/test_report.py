#!/usr/bin/env python3
"""What `make test` prints when a part failed, so CI's output alone says what broke and why.

For each failed test of the parts' JUnit XML (``scripts/run_tests.sh`` writes one per part into the
report folder): its id, the last lines of its error, and the log lines its services wrote while it
ran (``tests/conftest.py`` records when it started and which services it used). Each test's service
log lines are also written in full to ``<report folder>/<test>/<service>.log``, and the tail of each
service's whole log to ``<report folder>/services/``. A part whose process died without writing its
XML (a crashed worker, a signal) is reported with the last lines of its output.

    python scripts/test_report.py REPORT_DIR PART=EXIT [PART=EXIT ...]
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from devstack.cli import service_logs

MESSAGE_LINES = 3  # the error's first lines (what was expected), then its last (where it was raised)
ERROR_LINES = 30
LOG_LINES = 25
SERVICE_LOG_TAIL_BYTES = 4_000_000
# Log lines a second or two before the test's start belong to its setup (fixtures of module scope).
WINDOW_SLACK = timedelta(seconds=2)
# Every service's line starts with its time: PostgreSQL `2026-11-28 03:40:01.123 UTC`, Kafka
# `[2026-11-28 03:40:01,123]`, Spark `26/11/28 03:40:01`, Apicurio `2026-11-28 03:40:01,123`.
LINE_TIME = re.compile(r"^\[?(\d{2}|\d{4})[-/](\d{2})[-/](\d{2})[ T](\d{2}):(\d{2}):(\d{2})")
LOUD = re.compile(r"\b(WARN|WARNING|ERROR|FATAL|PANIC|SEVERE|Exception|Error)\b")


@dataclass(frozen=True)
class Failure:
    part: str
    test_id: str
    kind: str  # failure | error
    message: str
    text: str
    seconds: float
    started: datetime | None
    services: tuple[str, ...]

    @property
    def window(self) -> tuple[datetime, datetime] | None:
        if self.started is None:
            return None
        return self.started - WINDOW_SLACK, self.started + timedelta(seconds=self.seconds) + WINDOW_SLACK


def failures(xml_file: Path, part: str) -> list[Failure]:
    """The failed and errored test cases of one JUnit XML file."""
    found = []
    for case in ET.parse(xml_file).iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is None:
            continue
        props = {p.get("name"): p.get("value", "") for p in case.iter("property")}
        test_id = props.get("nodeid") or f"{case.get('classname')}::{case.get('name')}"
        started = props.get("started")
        found.append(
            Failure(
                part=part,
                test_id=test_id,
                kind=bad.tag,
                message=(bad.get("message") or "").strip(),
                text=(bad.text or bad.get("message") or "").strip(),
                seconds=float(case.get("time") or 0),
                started=datetime.fromisoformat(started) if started else None,
                services=tuple((props.get("services") or " ".join(service_logs())).split()),
            )
        )
    return found


def line_time(line: str) -> datetime | None:
    match = LINE_TIME.match(line)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups())
    try:
        return datetime(year + 2000 if year < 100 else year, month, day, hour, minute, second)
    except ValueError:
        return None


def lines_between(log: Path, start: datetime, end: datetime) -> list[str]:
    """The lines of ``log`` written from ``start`` to ``end``; an untimed line (a stack trace) goes with
    the timed line before it."""
    if not log.exists():
        return []
    kept, inside = [], False
    with log.open(errors="replace") as f:
        for line in f:
            when = line_time(line)
            if when is not None:
                if when > end:
                    break
                inside = when >= start
            if inside:
                kept.append(line.rstrip("\n"))
    return kept


def slug(test_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", test_id)[:150]


def report_failure(failure: Failure, reports: Path) -> None:
    where = f", started {failure.started:%H:%M:%S}" if failure.started else ""
    print(f"\n{failure.kind.upper()} {failure.test_id}  ({failure.part} part, {failure.seconds:.1f} s{where})")
    head = failure.message.splitlines()[:MESSAGE_LINES]
    for line in head:
        print(f"  > {line[:300]}")
    tail = failure.text.splitlines()[-ERROR_LINES:]
    if head and tail:
        print("  | ...")
    for line in tail:
        print(f"  | {line}")
    window = failure.window
    if window is None:
        print("  (no start time recorded: the test did not finish its teardown; see the service logs in full)")
        return
    folder = reports / slug(failure.test_id)
    logs = service_logs()
    for service in failure.services:
        lines = [line for log in logs.get(service, []) for line in lines_between(log, *window)]
        if not lines:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{service}.log").write_text("\n".join(lines) + "\n")
        loud = [line for line in lines if LOUD.search(line)]
        shown = (loud or lines)[-LOG_LINES:]
        what = "its warnings and errors" if loud else "its lines"
        print(f"  -- {service}: {len(lines)} lines while the test ran; {what}, the last {len(shown)} "
              f"(all in {folder / (service + '.log')}):")  # fmt: skip
        for line in shown:
            print(f"  {service[:5]}| {line[:300]}")


def keep_service_logs(reports: Path) -> None:
    """The tail of every service's log, beside the XML (a session's logs go with its machine)."""
    folder = reports / "services"
    folder.mkdir(parents=True, exist_ok=True)
    for service, logs in service_logs().items():
        for log in logs:
            if log.exists():
                with log.open("rb") as f:
                    f.seek(max(0, log.stat().st_size - SERVICE_LOG_TAIL_BYTES))
                    (folder / f"{service}-{log.name}").write_bytes(f.read())


def main(argv: list[str]) -> int:
    reports, parts = Path(argv[0]), dict(arg.split("=", 1) for arg in argv[1:])
    failed_parts = {part: int(code) for part, code in parts.items() if int(code) not in (0, 5)}
    if not failed_parts:
        return 0
    found: list[Failure] = []
    print(f"\n==== make test failed: the failed tests, their errors and their services' logs "
          f"(kept in {reports}) ====")  # fmt: skip
    for part, code in failed_parts.items():
        xml_file = reports / f"{part}.xml"
        part_failures = failures(xml_file, part) if xml_file.exists() else []
        found += part_failures
        if not part_failures:
            output = reports / f"{part}.out"
            tail = output.read_text(errors="replace").splitlines()[-ERROR_LINES:] if output.exists() else []
            why = "wrote no JUnit XML" if not xml_file.exists() else "has no failed test in its JUnit XML"
            print(f"\nthe {part} part exited {code} and {why} (a crash or a signal?); the last lines of its output:")
            for line in tail:
                print(f"  | {line}")
    for failure in found:
        report_failure(failure, reports)
    keep_service_logs(reports)
    print(f"\n==== {len(found)} failed: ====")
    for failure in found:
        print(f"{failure.kind.upper()} {failure.test_id} ({failure.part} part)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
