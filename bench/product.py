"""The product, the way a DAG runs it: start → Spark task on a launcher → commit, per phase, through
the runner (:func:`run_product`).

A launcher runs the Spark stage of a planned run: ``spark-submit spark_apps/run_job.py``
(a fresh driver JVM per run) or a Spark Connect client against the warm server. Both read
Kafka through Spark's Kafka source, parse, dedupe and COPY into the run's stage
in one Spark action, whose own time the job logs (``stage ... seconds=``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.context import REPO, Bench, Result
from bench.data import Dataset
from bench.rss import PeakRss
from bench.slices import spark_offsets
from reprocess.core.names import local_run_id
from reprocess.core.runs import EndMode, RunKind, RunRanges, RunRequest, StartMode
from reprocess.core.spec import PipelineSpec
from reprocess.postgres.commit import CommitResult

_STAGE_LOG = re.compile(r"stage run_id=\S+ pipeline=\S+ ranges=\d+ seconds=([0-9.]+)")


@dataclass
class StageRun:
    """What a launcher reports of one stage: the action's own seconds (from the job's log),
    the log file, the peak RSS of its processes."""

    action_seconds: float
    log: Path
    peak_rss_mb: dict[str, float] = field(default_factory=dict)


class Launcher(Protocol):
    name: str
    stays_warm: bool  # a server that outlives the run (JIT, Python workers): its first run is cold

    def stage(self, bench: Bench, spec: PipelineSpec, run_id: str, log_path: Path) -> StageRun: ...

    def restart(self) -> None:
        """Start the launcher's server afresh (one that ``stays_warm``), so its next run is cold."""

    def server_pid(self) -> int | None:
        """The pid of the server that ``stays_warm`` (None: the launcher has none, or it is down)."""


def _job_env(bench: Bench) -> dict[str, str]:
    """The job's secrets in the environment variables the driver reads them from, as the DAG's
    spark-submit launcher passes them."""
    from reprocess.postgres.db import libpq_url
    from reprocess.spark.entry_points import secret_env

    secrets = {"db_url": libpq_url(bench.db_url), "kafka_config": json.dumps(bench.kafka)}
    return {**os.environ, **{secret_env(name): value for name, value in secrets.items()}}


def spark_submit(bench: Bench, cmd: list[str], log_path: Path, what: str) -> dict[str, float]:
    """Run one spark-submit command with the bench's database and Kafka settings, its output into
    ``log_path``; return its peak memory, or raise naming ``what`` failed and where its log is."""
    with log_path.open("w") as fh:
        proc = subprocess.Popen(cmd, env=_job_env(bench), cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
        with PeakRss(lambda: [proc.pid]) as peak:
            code = proc.wait()
    if code != 0:
        raise RuntimeError(f"{what} failed ({code}); see {log_path}")
    return peak.mb


def _action_seconds(log_path: Path) -> float:
    m = _STAGE_LOG.search(log_path.read_text(errors="replace"))
    return float(m.group(1)) if m else float("nan")


@dataclass
class SparkSubmit:
    """``spark-submit spark_apps/run_job.py reprocess.runner.spark_run:read_job``, local[2], the DAG's spark conf."""

    name: str = "spark-submit"
    stays_warm: bool = False

    def restart(self) -> None:
        """Nothing outlives a spark-submit run."""

    def server_pid(self) -> int | None:
        return None

    def stage(self, bench: Bench, spec: PipelineSpec, run_id: str, log_path: Path) -> StageRun:
        from reprocess.spark.conf import spark_submit_command
        from reprocess.spark.entry_points import RUN_JOB, app_path

        job = "reprocess.runner.spark_run:read_job"
        args = [job, "--spec", str(spec.source_file), "--run-id", run_id, "--batch-size", str(spec.batch_size)]
        peak_mb = spark_submit(bench, spark_submit_command(app_path(RUN_JOB), *args), log_path, "spark-submit")
        return StageRun(_action_seconds(log_path), log_path, peak_mb)


@dataclass
class SparkConnect:
    """A Spark Connect client in this process against the warm server ``make services`` started,
    attached to the server's shared session (``reprocess.spark.connect.shared_session``) the way the
    DAG's Spark task attaches to it; the job is the task's (``reprocess.runner.spark_run.read_job``)."""

    name: str = "spark-connect"
    stays_warm: bool = True

    def restart(self) -> None:
        """Restart the embedded server as ``make services`` starts it (with its warm-up)."""
        from devstack import connect as server

        server.stop()
        server.start()
        server.warm_up()

    def server_pid(self) -> int | None:
        from devstack import connect as server

        try:
            return int(server.pidfile().read_text())
        except (OSError, ValueError):
            return None

    def stage(self, bench: Bench, spec: PipelineSpec, run_id: str, log_path: Path) -> StageRun:
        from devstack import connect as server
        from devstack import registry
        from reprocess.postgres.db import libpq_url
        from reprocess.runner.spark_run import read_job
        from reprocess.spark.connect import check_library, client_env, shared_session

        def server_pid() -> list[int]:
            pid = self.server_pid()
            return [pid] if pid else []

        handler = logging.FileHandler(log_path, mode="w")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("reprocess").addHandler(handler)
        try:
            with PeakRss(server_pid) as peak, client_env(), shared_session(server.url()) as spark:
                check_library(spark, server.url())
                avro = json.dumps({"url": registry.ccompat_url()}) if spec.needs_registry else None
                read_job(spark, spec=str(spec.source_file), run_id=run_id, db_url=libpq_url(bench.db_url),
                          kafka_config=json.dumps(bench.kafka), batch_size=str(spec.batch_size),
                          registry_config=avro)  # fmt: skip
        finally:
            logging.getLogger("reprocess").removeHandler(handler)
            handler.close()
        return StageRun(_action_seconds(log_path), log_path, peak.mb)


@dataclass
class ProductRun:
    """One run through the runner, each phase timed: its ranges, what the launcher reported, its result."""

    ranges: RunRanges
    staged: StageRun
    result: CommitResult
    started: float  # seconds of the start (snapshot, ranges, the stages before Spark)
    spark: float  # seconds of the launcher's Spark task
    committed: float  # seconds of the stages after Spark (the commit, or the batches' finish)


def run_product(
    bench: Bench, spec: PipelineSpec, request: RunRequest, run_id: str, launcher: Launcher, log_path: Path
) -> ProductRun:
    """One run the way a DAG makes it, through the runner like every other caller: ``start_run``
    (``plan_offsets``: snapshot, ranges, the stages before Spark) → the launcher's Spark task
    (``read_job``, ``spark_read_stage``'s entry) → ``evaluate`` of the stages after Spark
    (``commit_transaction``)."""
    from reprocess.core.stages import for_task
    from reprocess.core.tasks import Task
    from reprocess.postgres.db import make_engine
    from reprocess.runner.evaluate import RunContext, evaluate
    from reprocess.runner.start import start_run

    engine = make_engine(bench.db_url)
    try:
        t0 = time.monotonic()
        ranges, stages = start_run(engine, bench.kafka, spec, request, run_id)
        t1 = time.monotonic()
        staged = launcher.stage(bench, spec, run_id, log_path)
        t2 = time.monotonic()
        result = evaluate(for_task(stages, Task.COMMIT), RunContext(engine, spec))
        t3 = time.monotonic()
    finally:
        engine.dispose()
    if result is None:
        raise RuntimeError(f"{spec.name}: run {run_id} ended without a commit (stages {stages})")
    return ProductRun(ranges, staged, result, t1 - t0, t2 - t1, t3 - t2)


def product(
    bench: Bench,
    ds: Dataset,
    launcher: Launcher,
    label: str,
    run_name: str = "bench",
    ends: dict[int, int] | None = None,
    **spec_overrides: Any,
) -> Result:
    """A backfill of the dataset through :func:`run_product`, each phase timed; the Spark phase is
    split into the one action and the rest (JVM or session start, planning, stop). A second call
    with the same ``label`` and another ``run_name`` is a replay of the same range into the same
    target; ``ends`` bound it to ``[0, ends[p])`` per partition (the older-slice replay)."""
    spec = bench.spec(label, ds.topic, **spec_overrides)
    if ends is None:
        request = RunRequest(RunKind.BACKFILL, StartMode.EARLIEST, EndMode.LATEST)
    else:
        request = RunRequest(RunKind.BACKFILL, StartMode.EARLIEST, EndMode.OFFSETS, None, spark_offsets(ds.topic, ends))
    log_path = bench.out / f"{spec.name}.spark.log"
    run = run_product(bench, spec, request, local_run_id(spec.name, run_name), launcher, log_path)
    planned = {r.partition: (r.start, r.end) for r in run.ranges.ranges}
    if planned != {p: (0, e) for p, e in (ends or ds.ends).items()}:
        raise RuntimeError(f"{spec.name}: planned {planned}, expected [0, end) for {ends or ds.ends}")
    staged, result = run.staged, run.result
    return Result(
        f"product on {launcher.name}: plan → Spark → commit ({label})",
        sum(ends.values()) if ends else ds.records,
        run.started + run.spark + run.committed,
        {"plan": run.started, "spark total": run.spark, "  of which the Spark action": staged.action_seconds,
         "  of which launch/session/planning/stop": run.spark - staged.action_seconds, "commit": run.committed},
        {"launcher": launcher.name, "records_read": result.records_read, "rows_staged": result.rows_staged,
         "rows_upserted": result.rows_upserted, "dead_letters": result.dead_letters,
         "peak_rss_mb": staged.peak_rss_mb, "spark_log": str(staged.log.relative_to(REPO)),
         **bench.fingerprint(spec)},
    )  # fmt: skip
