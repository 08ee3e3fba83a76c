"""The ends of the wheel's Airflow range the README install test runs against (no services, no registry)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tests.support.airflow_releases import declared_range, range_ends

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"

# What `pip index versions apache-airflow` listed on 2026-12-07 (3.3.0 to 3.3.2 served, 3.0.5 and 3.1.4
# yanked and so not listed), with a pre-release and a 4.0 added: the ends must skip both.
SERVED = ["3.3.2", "3.3.1", "3.3.0", "3.2.2", "3.1.3", "3.0.6", "2.11.2", "3.4.0rc1", "4.0.0"]


def test_the_ends_of_the_wheels_declared_airflow_range_are_its_first_and_newest_served_3x_releases() -> None:
    spec = declared_range(PYPROJECT)
    assert range_ends(spec, SERVED) == ("3.3.0", "3.3.2")
    # The lowest end is the range's own lower bound: no release below it is allowed in.
    assert "3.2.2" not in spec and "3.3.0" in spec and "3.99" in spec and "4.0.0" not in spec


def test_a_range_the_registry_serves_no_release_of_is_an_error_naming_the_range() -> None:
    with pytest.raises(LookupError, match=r"no apache-airflow release in <4,>=3.5"):
        range_ends(SpecifierSet(">=3.5,<4"), SERVED)
