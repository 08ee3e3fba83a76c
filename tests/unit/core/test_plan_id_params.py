"""A form that applies a stored plan (``plan_id``) carries nothing that would change what the plan
showed (review V finding 9b): a preview, a dry run or a rebuild with a plan id is refused at parse."""

from __future__ import annotations

import pytest

from reprocess.core.errors import SpecError
from reprocess.core.runs import RunMode, RunRequest


@pytest.mark.parametrize("choice", [{"preview": True}, {"dry_run": True}, {"mode": "rebuild"}])
def test_plan_id_with_preview_dry_run_or_a_rebuild_mode_is_refused(choice):
    with pytest.raises(SpecError, match=r"plan_id .* does not combine with"):
        RunRequest.from_params({"plan_id": "plan-orders-1", **choice})


def test_plan_id_with_the_forms_defaults_is_an_apply():
    request = RunRequest.from_params({"plan_id": "plan-orders-1", "mode": "merge", "preview": False, "dry_run": False})
    assert (request.preview, request.dry_run, request.mode) == (False, False, RunMode.MERGE)
