"""The long tier's test ids (``tests/long_tier.txt``): ``make test-all`` runs them, ``make test`` leaves
them out. Read by ``tests/conftest.py`` to mark them and by the feature map's check."""

from __future__ import annotations

from pathlib import Path

LONG_TIER = Path(__file__).resolve().parents[1] / "long_tier.txt"


def long_tier_ids() -> tuple[str, ...]:
    """Each line's test id or id prefix (a file), comments and blank lines left out."""
    lines = (line.split("#", 1)[0].strip() for line in LONG_TIER.read_text().splitlines())
    return tuple(line for line in lines if line)
