"""spark-submit's output without Ivy's resolution report.

When Spark's Kafka source comes by its Maven coordinates (``--packages``, a cluster's launcher),
spark-submit first prints Ivy's report: the settings, every artifact found, a table and the
retrieval, some 30 lines that bury the job's own lines in a task log. Spark's log level does not
reach them (Ivy writes to stderr itself), so the report is replaced here by one line that says
what Ivy resolved. A report that shows a problem (an unresolved dependency, a failed download, an
exception, a warning) is kept from that line on, so the reason a submit failed is never left out; the
one line still follows it when Ivy resolved everything in the end (a first run's report warns of every
artifact one resolver lacked before the next one found it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final

from reprocess.spark.conf import LOG_LEVELS

# Ivy's first lines: the settings it loads, or the cache it uses (settings given by the default).
_REPORT_START: Final = re.compile(r"^(:: loading settings ::|Ivy Default Cache set to:)")
# Its last line: "11 artifacts copied, 0 already retrieved (5kB/12ms)".
_REPORT_END: Final = re.compile(r"^(\d+) artifacts copied, (\d+) already retrieved")
_PROBLEM: Final = re.compile(r"UNRESOLVED|NOT FOUND|not found|FAILED|:::: (ERRORS|WARNINGS)|Exception|Error")
# The levels at which the report stays: the user asked for Spark's INFO lines.
_VERBOSE_LEVELS: Final = LOG_LEVELS[LOG_LEVELS.index("INFO") :]


def keeps_ivy_report(level: str) -> bool:
    """Whether a driver at Spark log ``level`` shows Ivy's report (INFO and more verbose do).

    Examples
    --------
    >>> keeps_ivy_report("WARN"), keeps_ivy_report("INFO"), keeps_ivy_report("DEBUG")
    (False, True, True)
    """
    return level in _VERBOSE_LEVELS


def without_ivy_report(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` of spark-submit's output, Ivy's report replaced by one line of what it resolved.

    Examples
    --------
    >>> report = [":: loading settings :: file = ivysettings.xml", "\\tfound a#b;1 in central",
    ...           "\\t0 artifacts copied, 11 already retrieved (0kB/11ms)", "hello"]
    >>> list(without_ivy_report(report))  # doctest: +NORMALIZE_WHITESPACE
    ['Ivy resolved the --packages coordinates: 11 artifacts (0 downloaded, 11 from its cache);
      its report is left out ([reprocess] spark_log_level = INFO keeps it)', 'hello']
    >>> list(without_ivy_report([":: loading settings :: x", ":: org.x#y;1: not found", "at z"]))
    [':: org.x#y;1: not found', 'at z']
    >>> first_run = [":: loading settings :: x", "found a#b;1", ":::: WARNINGS", "[NOT FOUND ] a#b",
    ...              "1 artifacts copied, 0 already retrieved (5kB/1ms)"]
    >>> list(without_ivy_report(first_run))  # doctest: +NORMALIZE_WHITESPACE
    [':::: WARNINGS', '[NOT FOUND ] a#b', '1 artifacts copied, 0 already retrieved (5kB/1ms)',
     'Ivy resolved the --packages coordinates: 1 artifacts (1 downloaded, 0 from its cache);
      the rest of its report is left out ([reprocess] spark_log_level = INFO keeps it)']
    """
    hidden = kept = False  # inside Ivy's report: left out, or kept from a problem on
    for line in lines:
        text = line.strip()
        if not (hidden or kept) and _REPORT_START.match(text):
            hidden = True
        if not (hidden or kept):
            yield line
            continue
        if hidden and _PROBLEM.search(text):
            hidden, kept = False, True
        if kept:
            yield line
        end = _REPORT_END.match(text)
        if end:
            copied, cached = int(end.group(1)), int(end.group(2))
            rest = "the rest of its report is left out" if kept else "its report is left out"
            hidden = kept = False
            yield (
                f"Ivy resolved the --packages coordinates: {copied + cached} artifacts ({copied} downloaded, "
                f"{cached} from its cache); {rest} ([reprocess] spark_log_level = INFO keeps it)"
            )
