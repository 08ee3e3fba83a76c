"""The warm server's JIT: how much of a run's CPU its compiler threads still spend.

After a start, the Spark Connect server's HotSpot compilers go on compiling the hot paths for
several 1 M runs. Measured after a restart and the warm-up (docs/performance.md, "the warm run was
the second"): the server's CPU per 1 M stage 32, 17.5, 17.5, 16, 13, 12.4 s, of which its C1 and
C2 compiler threads 8.2, 4.5, 4.0, 3.4, 2.1, 1.3 s (at load 10-15). A server that has served runs for a while pays
the last of these; the bench times its warm run once the compilers' share of a run is that small,
or after four untimed runs (:func:`settle`; the share falls slowly, the driver's per-query planning
code reaching the compile thresholds last), and prints how many ran.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

COMPILER_THREADS: Final = ("C1 CompilerThre", "C2 CompilerThre")  # /proc/<pid>/task/*/comm, 15 chars
SETTLED_SHARE: Final = 0.12
"""A run whose compiler threads spent less than this share of the JVM's CPU leaves it settled."""
MAX_RUNS: Final = 4


def jvm_cpu(pid: int) -> tuple[float, float]:
    """(its compiler threads', all its threads') CPU seconds of the JVM ``pid`` so far; (0, 0) gone."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(stat: Path) -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    try:
        total = cpu(Path(f"/proc/{pid}/stat"))  # the process's own count keeps ended threads' CPU
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    compiling = 0.0
    for task in tasks:
        try:
            if (task / "comm").read_text().startswith(COMPILER_THREADS):
                compiling += cpu(task / "stat")
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return compiling, total


def settle(pid: Callable[[], int | None], run_once: Callable[[int], object]) -> list[float]:
    """Call ``run_once(i)`` until one call leaves the compilers' share of the JVM's CPU in it under
    :data:`SETTLED_SHARE`, at most :data:`MAX_RUNS` times; returns each call's share."""
    shares: list[float] = []
    for i in range(MAX_RUNS):
        server = pid()
        before = jvm_cpu(server) if server else (0.0, 0.0)
        run_once(i)
        after = jvm_cpu(server) if server else (0.0, 0.0)
        shares.append((after[0] - before[0]) / max(1e-9, after[1] - before[1]))
        if shares[-1] < SETTLED_SHARE:
            break
    return shares
