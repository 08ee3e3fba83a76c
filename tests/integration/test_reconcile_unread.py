"""A reconciliation that runs before the incremental has read its whole window (the scheduler runs
the two independently; the soak saw 7 of 15 checks fail so) must not call the unread part a gap:
offsets at or above the ledger are the incremental's lag. The window is "not yet stable" (retried),
its part below the ledger is checked, and once the incremental passes it the window is ok. The
target then equals the oracle (``tests/support/oracle.py``) over every record produced.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reprocess.core.errors import WindowNotStable
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from tests.support.helpers import (
    ledger,
    oracle_rows,
    orders_spec,
    plan_stage_commit,
    reconcile_over_connect,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

BASE = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = (BASE, BASE + timedelta(days=1))


def test_a_window_past_the_ledger_is_not_yet_read_never_a_gap_and_ok_once_the_incremental_reads_it(
    kafka_config, engine, unique_name
):
    kafka, topic = kafka_config, unique_name
    spec = orders_spec(unique_name, topic, max_dead_letter_ratio=0.5)
    demo_data.create_topic(kafka, topic, 2)
    first = demo_data.produce(kafka, topic, 2, demo_data.order_events(40, 2, seed=5), base_time=BASE)
    plan_stage_commit(engine, kafka, spec, RunRequest.from_params({}), f"{unique_name}-backfill")
    read = ledger(engine, spec)

    # Records of the same day arrive after the last run: the incremental has not read them yet.
    later = demo_data.produce(
        kafka, topic, 2, demo_data.order_events(30, 2, seed=9), base_time=BASE + timedelta(hours=6)
    )
    ends = {p: max(o for q, o, *_ in later.messages if q == p) + 1 for p in (0, 1)}
    assert all(ends[p] > read[p] for p in (0, 1))

    pattern = "; ".join(
        rf"{topic}\[{p}\] not yet stable: not read yet: the ledger is at {read[p]}, below the window's end {ends[p]}.*"
        for p in (0, 1)
    )
    with pytest.raises(WindowNotStable, match=pattern):
        reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-early")

    plan_stage_commit(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-incremental")
    assert ledger(engine, spec) == ends
    verdicts = reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-after")
    assert [v.verdict for v in verdicts] == ["ok", "ok"]
    everything = demo_data.Produced(sorted(first.messages + later.messages), {**first.timestamps, **later.timestamps})
    assert target_rows(engine, spec) == oracle_rows(everything)
