"""docs/testing.md's feature map names, for every feature of the manual, a test that `make test` runs:
a test renamed, removed or moved to the long tier fails here, so no feature drops out of the default tier
unnoticed (issue 54)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.tiers import long_tier_ids

REPO = Path(__file__).resolve().parents[3]
SECTION = "## Every feature, proved in the default tier"


def _mapped_tests() -> list[str]:
    text = (REPO / "docs" / "testing.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\|[^|]+\| `(tests/[^`]+)` \|$", section, flags=re.MULTILINE)


def test_every_mapped_feature_names_a_test_that_exists_outside_the_long_tier() -> None:
    mapped = _mapped_tests()
    assert len(mapped) >= 40, mapped
    long_tier = long_tier_ids()
    for test_id in mapped:
        path, name = test_id.split("::")
        assert re.search(rf"^def {name}\(", (REPO / path).read_text(), flags=re.MULTILINE), f"{test_id} is gone"
        assert not test_id.startswith(long_tier), f"{test_id} is in tests/long_tier.txt: map a default-tier test"
