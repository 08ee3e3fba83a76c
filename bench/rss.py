"""Peak resident memory of a case's processes, sampled from ``/proc`` while the case runs.

Memory is the proportional set size (PSS, ``/proc/<pid>/smaps_rollup``): RSS where a page
shared by N processes counts 1/N, so the Python workers forked from one daemon are not
counted several times over. For a single JVM it equals its RSS.

A case names its root processes (spark-submit's, or the Spark Connect server's); every
descendant is counted. Processes are grouped into the JVM (driver or server), the Python
workers (``pyspark.daemon`` and the workers it forks) and other Python (a spark-submit app's
driver), and the peak of each group's summed RSS is kept: a driver whose memory grows with
the records (a collect) shows as a JVM peak that grows from 1 M to 10 M records.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final

GROUPS: Final = ("jvm", "python workers", "python driver")


def _processes() -> dict[int, tuple[int, str]]:
    """pid → (ppid, cmdline) of every process still readable."""
    out = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        out[int(proc.name)] = (int(stat[1]), cmdline)
    return out


def _pss(pid: int) -> int:
    """Proportional set size in bytes: RSS with pages shared by forked workers counted once."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def group_of(cmdline: str) -> str:
    """Which group a process counts in (see the module docstring).

    Examples
    --------
    >>> group_of("/usr/lib/jvm/java-17/bin/java -cp ... org.apache.spark.deploy.SparkSubmit")
    'jvm'
    >>> group_of("/repo/.venv/bin/python -m pyspark.daemon pyspark.worker")
    'python workers'
    >>> group_of("/repo/.venv/bin/python /x/spark_apps/run_job.py reprocess.runner.spark_run:read_job --spec x")
    'python driver'
    """
    exe = cmdline.split(" ", 1)[0]
    if exe.endswith("/java") or exe == "java":
        return "jvm"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python workers"
    return "python driver"


def sample(roots: list[int]) -> dict[str, int]:
    """Summed PSS bytes per group of ``roots`` and all their descendants, now."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cmd) in procs.items():
        children.setdefault(ppid, []).append(pid)
    totals = dict.fromkeys(GROUPS, 0)
    todo = [p for p in roots if p in procs]
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        cmd = procs[pid][1]
        if not cmd.startswith(("/bin/bash", "bash")):  # spark-submit's shell wrapper holds ~nothing
            totals[group_of(cmd)] += _pss(pid)
        todo.extend(children.get(pid, ()))
    return totals


class PeakRss:
    """``with PeakRss(lambda: [pid]) as peak: ...`` then ``peak.mb``: peak MB per group.

    ``roots`` is called at every sample, so a case can name a process started after entry.
    """

    def __init__(self, roots: Callable[[], list[int]], interval: float = 0.5) -> None:
        self.roots = roots
        self.interval = interval
        self.peak = dict.fromkeys(GROUPS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def _run(self) -> None:
        while True:
            for group, rss in sample(self.roots()).items():
                self.peak[group] = max(self.peak[group], rss)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mb(self) -> dict[str, float]:
        return {g: round(b / 2**20, 1) for g, b in self.peak.items() if b}
