"""The Airflow releases the README install test runs against: the lowest and the highest that the
wheel's declared range allows among those the package registry serves (issue 59 item 8).

Computed when the test runs, not pinned: the range comes from pyproject.toml and the served
releases from ``pip index versions`` (pip leaves out yanked releases and pre-releases), so the day a
new 3.x is served it is the highest, and a range that is moved moves both ends with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

AIRFLOW = "apache-airflow"


def declared_range(pyproject: Path) -> SpecifierSet:
    """The wheel's ``apache-airflow`` specifier, as ``[project] dependencies`` declares it."""
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    (spec,) = [req.specifier for req in map(Requirement, dependencies) if req.name == AIRFLOW]
    return spec


def range_ends(spec: SpecifierSet, served: Iterable[str]) -> tuple[str, str]:
    """The lowest and the highest final release in ``served`` that ``spec`` allows.

    Examples
    --------
    >>> range_ends(SpecifierSet(">=3.3,<4"), ["2.11.2", "3.2.2", "3.3.0", "3.3.2", "3.4.0rc1", "4.0.0"])
    ('3.3.0', '3.3.2')
    """
    allowed = sorted(spec.filter(served, prereleases=False), key=Version)
    if not allowed:
        raise LookupError(f"the registry serves no {AIRFLOW} release in {spec}")
    return allowed[0], allowed[-1]


def served_releases(name: str = AIRFLOW) -> list[str]:
    """The releases of ``name`` the package registry serves, as pip finds them."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "--json", "--disable-pip-version-check", name]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    versions: list[str] = json.loads(done.stdout)["versions"]
    return versions
