"""docs/troubleshooting.md lists every error kind the product raises, each with its fix and whether
Airflow retries it, as the DAGs' retry policy decides."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from airflow.sdk import RetryAction

from reprocess.airflow.common import RETRY_POLICY
from reprocess.core import errors

PAGE = Path(__file__).resolve().parents[3] / "docs" / "troubleshooting.md"
KINDS = sorted(
    (cls for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, errors.ReprocessError)),
    key=lambda cls: cls.__name__,
)


def sections() -> dict[str, str]:
    """Error kind -> its section's text (a ``### `Kind``` heading, up to the next heading)."""
    parts = re.split(r"^#{2,3} ", PAGE.read_text(), flags=re.M)
    return {m.group(1): part for part in parts if (m := re.match(r"`(\w+)`\n", part))}


def test_every_error_kind_has_a_section_on_the_troubleshooting_page():
    listed = sections()
    assert [cls.__name__ for cls in KINDS if cls.__name__ not in listed] == []
    assert set(listed) <= {cls.__name__ for cls in KINDS}, "a section for a kind the package does not define"


@pytest.mark.parametrize("kind", KINDS, ids=lambda cls: cls.__name__)
def test_each_section_gives_a_fix_and_says_what_the_retry_policy_does(kind: type[errors.ReprocessError]):
    section = sections()[kind.__name__]
    assert "**Fix:**" in section, kind.__name__
    (retried,) = re.findall(r"\*\*Retried:\*\* (.+)", section)
    fails_at_once = RETRY_POLICY.evaluate(kind("x"), 1, 3).action is RetryAction.FAIL
    assert retried.startswith("no, fails at once") == fails_at_once, (kind.__name__, retried)
