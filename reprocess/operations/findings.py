"""What a check of a spec reports: one finding per problem (or per thing found fine), with the
spec file, the check, how bad it is and the fix (``reprocess validate``, a backfill's dry run)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.StrEnum):
    ERROR = "error"  # a run would fail or lose records to dead letters: exit code 1
    WARNING = "warning"  # worth a look, nothing fails
    OK = "ok"  # what was checked and found fine (partition counts, sample sizes)


@dataclass(frozen=True, slots=True)
class Finding:
    source: str  # the spec file
    check: str  # yaml, schema, spec, ordering, topic, sample, path, table
    severity: Severity
    problem: str
    fix: str = ""

    def render(self) -> str:
        fix = f"\n    fix: {self.fix}" if self.fix else ""
        return f"{self.severity.value.upper():7} {self.source}: [{self.check}] {self.problem}{fix}"
