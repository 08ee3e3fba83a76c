"""spark-submit's output in a task log: Ivy's report replaced by one line, its problems kept."""

from __future__ import annotations

from reprocess.spark.submit_output import keeps_ivy_report, without_ivy_report

# spark-submit 4.2 --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0, as printed here
RESOLVED = """WARNING: Using incubator modules: jdk.incubator.vector
:: loading settings :: file = /work/devstack/jvm/ivysettings.xml
:: loading settings :: url = jar:file:/venv/pyspark/jars/ivy-2.5.3.jar!/org/apache/ivy/core/settings/ivysettings.xml
Ivy Default Cache set to: /root/.ivy2.5.2/cache
The jars for the packages stored in: /root/.ivy2.5.2/jars
org.apache.spark#spark-sql-kafka-0-10_2.13 added as a dependency
:: resolving dependencies :: org.apache.spark#spark-submit-parent-e87b2b50;1.0
\tconfs: [default]
\tfound org.apache.spark#spark-sql-kafka-0-10_2.13;4.2.0 in central
\tfound org.apache.kafka#kafka-clients;3.9.2 in central
:: resolution report :: resolve 740ms :: artifacts dl 12ms
\t---------------------------------------------------------------------
\t|                  |            modules            ||   artifacts   |
\t|       conf       | number| search|dwnlded|evicted|| number|dwnlded|
\t---------------------------------------------------------------------
\t|      default     |   11  |   0   |   0   |   0   ||   11  |   0   |
\t---------------------------------------------------------------------
:: retrieving :: org.apache.spark#spark-submit-parent-e87b2b50
\tconfs: [default]
\t2 artifacts copied, 9 already retrieved (1024kB/11ms)
26/11/28 15:28:36 WARN NativeCodeLoader: Unable to load native-hadoop library
run committed
""".splitlines()

UNRESOLVED = """:: loading settings :: url = jar:file:/venv/ivy-2.5.3.jar!/ivysettings.xml
Ivy Default Cache set to: /root/.ivy2.5.2/cache
:: resolving dependencies :: org.apache.spark#spark-submit-parent-1;1.0
\tconfs: [default]
:: resolution report :: resolve 95ms :: artifacts dl 0ms
\t\t::::::::::::::::::::::::::::::::::::::::::::::
\t\t::          UNRESOLVED DEPENDENCIES         ::
\t\t::::::::::::::::::::::::::::::::::::::::::::::
\t\t:: org.example#missing;1.0: not found
:: USE VERBOSE OR DEBUG MESSAGE LEVEL FOR MORE DETAILS
Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: org.example#missing;1.0: not found]
""".splitlines()


def test_a_resolved_report_becomes_one_line_and_the_jobs_lines_stay():
    out = list(without_ivy_report(RESOLVED))
    assert out == [
        "WARNING: Using incubator modules: jdk.incubator.vector",
        "Ivy resolved the --packages coordinates: 11 artifacts (2 downloaded, 9 from its cache); "
        "its report is left out ([reprocess] spark_log_level = INFO keeps it)",
        "26/11/28 15:28:36 WARN NativeCodeLoader: Unable to load native-hadoop library",
        "run committed",
    ]


def test_an_unresolved_dependency_is_kept_from_its_first_problem_line_to_the_exception():
    out = list(without_ivy_report(UNRESOLVED))
    assert out[0].strip() == "::          UNRESOLVED DEPENDENCIES         ::"
    assert any("org.example#missing;1.0: not found" in line for line in out)
    assert out[-1].startswith('Exception in thread "main"')


def test_output_without_a_report_passes_unchanged():
    lines = ["26/11/28 WARN x", "Traceback (most recent call last):", "  ValueError: y"]
    assert list(without_ivy_report(lines)) == lines


def test_info_and_more_verbose_levels_keep_the_report():
    assert [keeps_ivy_report(level) for level in ("OFF", "ERROR", "WARN", "INFO", "DEBUG", "ALL")] == [
        False, False, False, True, True, True,
    ]  # fmt: skip
