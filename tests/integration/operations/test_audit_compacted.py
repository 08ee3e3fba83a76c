"""``reprocess audit`` on a compacted topic (issue 57 item 5): keys whose records real Kafka compaction took.

Compaction keeps each key's LAST record, not its newest by the spec's ordering: a payment whose newest
version arrived before a late retry of an older one loses that newest record, and a key written again past
the ledger loses every record the product read. The table still holds what the product derived from them;
the log can no longer prove it. Such rows are unprovable: counted and listed apart, left alone by the heal,
never "equal". The produced messages and what the broker kept are the oracle (it imports nothing of the
product).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import text

from bench import cdc_source as cdc
from reprocess.kafka import demo_data
from tests.integration.operations.test_audit import BASE, _audit, _stored
from tests.support import oracle
from tests.support.helpers import PAYMENTS_SPEC, backfill, create_compacted_topic, ledger, orders_spec

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
DAY = timedelta(days=1)


def test_audit_lists_keys_whose_records_compaction_took_as_unprovable_and_the_heal_leaves_them(
    kafka_config, engine, unique_name
):
    spec = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC)
    create_compacted_topic(kafka_config, unique_name)
    first = demo_data.produce(kafka_config, unique_name, 1, demo_data.payment_events(40), malformed=(),
                              base_time=BASE)  # fmt: skip
    newest = oracle.expected_by_version(first, "payment_id")  # key -> (version, partition, offset)
    last = {json.loads(v)["payment_id"]: o for _p, o, _k, v in sorted(first.messages)}  # what compaction keeps
    backfill(engine, kafka_config, spec, f"{unique_name}-load")
    loaded = _stored(engine, spec)
    assert set(loaded) == set(newest)
    end = ledger(engine, spec)[0]

    # Past the ledger (not read by the audit): a newer version of one key whose records were in order, then a
    # record that rolls the segment so the cleaner may take everything before it. Kafka rolls by the records'
    # timestamps (segment.ms past the segment's first), so each is stamped a day after the one before.
    in_order = sorted(k for k, (_v, _p, o) in newest.items() if last[k] == o)
    rewritten, changed = in_order[0], in_order[1]
    again = {**json.loads(next(v for _p, o, _k, v in first.messages if o == newest[rewritten][2])), "version": 9}
    demo_data.produce(kafka_config, unique_name, 1, [(rewritten, again)], malformed=(), base_time=BASE + DAY)
    filler = {**again, "payment_id": "z-filler", "version": 1}
    demo_data.produce(kafka_config, unique_name, 1, [("z-filler", filler)], malformed=(), base_time=BASE + 2 * DAY)

    def compacted() -> bool:
        kept = [o for o, _e in cdc.events(kafka_config, unique_name) if o < end]
        return sorted(kept) == sorted(o for k, o in last.items() if k != rewritten)

    cdc.until("compaction of every key's earlier records", compacted, seconds=120)
    # Unprovable: the rewritten key (no record left below the ledger) and every key whose newest version
    # came before a late retry of an older one (compaction kept the retry). The rest is provable.
    unprovable = sorted([rewritten, *(k for k, (_v, _p, o) in newest.items() if last[k] != o)])
    assert len(unprovable) > 1, "payment_events gave no late retry"
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {spec.qualified_target} SET status = 'wrong' WHERE payment_id = :k"), {"k": changed})

    found = _audit(engine, kafka_config, spec, f"{unique_name}-a1", heal=True)
    assert found["counts"] == {"differ": 1, "missing": 0, "must not be": 0, "unprovable": len(unprovable)}, found
    assert [e["key"] for e in found["examples"]["unprovable"]] == unprovable[:5]
    assert found["healed"] == {"differ": 1, "missing": 0, "must not be": 0}
    assert found["verdict"] == "differences"
    assert _stored(engine, spec) == loaded  # the heal put `changed` back and left the unprovable rows as they were

    again_found = _audit(engine, kafka_config, spec, f"{unique_name}-a2")
    assert again_found["counts"] == {"differ": 0, "missing": 0, "must not be": 0, "unprovable": len(unprovable)}
    assert again_found["verdict"] == "unprovable"  # never "equal"
    assert again_found["heal_run"] is None
