"""Planning by timestamp on a real broker: every broker answer is verified against record timestamps.

The local broker answers offsets-for-times with 0 for every time (DESIGN §5), so these
tests exercise the verification and the binary-search fallback; on Apache Kafka the broker's
answer passes the verification directly. Either way the planned offsets must equal the
first record at/after the time, computed here from the delivery reports.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.operations.plan import plan_run
from tests.integration.helpers import orders_spec

pytestmark = pytest.mark.integration("kafka")
BASE = datetime(2026, 11, 1, tzinfo=UTC)


def _first_at_or_after(produced: demo_data.Produced, partition: int, ts: datetime, log_end: int) -> int:
    ms = int(ts.timestamp() * 1000)
    offsets = [o for (p, o), t in sorted(produced.timestamps.items()) if p == partition and t >= ms]
    return min(offsets) if offsets else log_end


@pytest.mark.parametrize("start_s, end_s", [(0, 50), (37, 120), (100, 10_000)])
def test_timestamp_range_resolves_to_the_first_records_at_or_after_each_time(
    kafka_config, engine, unique_name, start_s, end_s
):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(60, 3), malformed=(),
                                 transactional_every=40, base_time=BASE)  # fmt: skip
    log_ends = {p: max(o for q, o, *_ in produced.messages if q == p) + 1 for p in (0, 1)}
    start, end = BASE + timedelta(seconds=start_s), BASE + timedelta(seconds=end_s)
    request = RunRequest.from_params(
        {"start_mode": "timestamp", "start_value": start.isoformat(), "end_mode": "timestamp",
         "end_value": end.isoformat(), "dry_run": True}
    )  # fmt: skip

    plan = plan_run(engine, kafka_config, spec, request, unique_name)

    assert {r.partition: (r.start, r.end) for r in plan.ranges} == {
        p: (_first_at_or_after(produced, p, start, log_ends[p]), _first_at_or_after(produced, p, end, log_ends[p]))
        for p in (0, 1)
    }
