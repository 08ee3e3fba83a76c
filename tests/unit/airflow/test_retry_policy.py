"""The pipeline DAGs' retry policy: an error a retry cannot change fails its task at once (no services)."""

from __future__ import annotations

import pytest
from airflow.sdk import RetryAction

from reprocess.airflow.common import RETRY_POLICY
from reprocess.core.errors import (
    ConnectionConfigError,
    DataLossError,
    FencedRunError,
    OrderingError,
    ReconciliationGap,
    RegistryError,
    SpecError,
    WindowNotStable,
)


@pytest.mark.parametrize(
    "error",
    [
        SpecError("p.yaml: field 'key': must list one or more of the columns"),
        OrderingError("p: topic t has 3 partitions, 2 at the last committed run"),
        ConnectionConfigError("connection kafka_default must set 'bootstrap.servers' in its extra"),
        DataLossError("p t[0]: offsets [0, 5) are below the log start 5", pipeline="p", topic="t", partition=0),
        FencedRunError("p: run r is fenced", pipeline="p", run_id="r"),
        ReconciliationGap("p window [a, b): t[0] 5 records missing", pipeline="p"),
        # the check ran after wait_for_incremental gave up waiting for the incremental
        WindowNotStable("p window [a, b): t[0] not yet stable: not read yet", pipeline="p"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_an_error_a_retry_cannot_change_fails_at_once(error):
    assert RETRY_POLICY.evaluate(error, try_number=1, max_tries=3).action is RetryAction.FAIL


def test_an_unreachable_service_is_retried():
    error = RegistryError("the Schema Registry at http://r cannot be reached")
    assert RETRY_POLICY.evaluate(error, try_number=1, max_tries=3).action is RetryAction.DEFAULT
