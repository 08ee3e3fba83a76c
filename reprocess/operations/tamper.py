"""The tamper check, ``reprocess audit --stored PIPELINE``: has any row of the target been changed,
removed or inserted outside the product since it was written? One scan of the target, no Kafka.

It recomputes each row's digest from its stored values and compares it with the digest the product
wrote with the row (a mismatch: the row was changed), and compares the count and sum of the stored
digests with the ones the product kept in its own transactions (a lower count: rows removed; rows
without a digest or a higher count: rows inserted; equal counts with another sum: rows replaced).
What each one means and why it cannot be fooled by accident: :mod:`reprocess.postgres.digest`.
It proves the table is still what the product wrote, not that what it wrote is what the log says:
that is the audit's question (``reprocess audit``, which reads the log).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, Final

from psycopg2 import sql
from sqlalchemy import Engine

from reprocess.core.spec import PipelineSpec
from reprocess.postgres.db import one_row, pg_cursor
from reprocess.postgres.digest import pinned_output
from reprocess.postgres.target import target_identifier

EXAMPLES: Final = 5


@dataclass(frozen=True, slots=True)
class StoredCheck:
    """The verdict on one target: counts per kind and a few keys of each (``key|key`` text)."""

    pipeline: str
    table: str
    rows: int  # rows in the table now
    recorded_rows: int  # rows with a digest, as the product's own writes left them
    changed: int  # rows whose values no longer match their digest
    removed: int  # rows the product wrote that are gone
    inserted: int  # rows the product did not write (no digest), or copies beyond its count
    sum_differs: bool  # same count of digests, another sum: a row replaced by a copy of another
    changed_keys: list[str] = field(default_factory=list)
    inserted_keys: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.changed or self.removed or self.inserted or self.sum_differs)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": "ok" if self.ok else "tampered"}


class NotGuarded(Exception):
    """The target has no digests to check (missing, or written before ``sql/026`` and never migrated)."""


def check_stored(engine: Engine, spec: PipelineSpec) -> StoredCheck:
    """One scan of ``spec``'s target in a read-only transaction (a snapshot: the count, sum and rows
    are of one moment, so a commit running meanwhile cannot look like tampering).

    Raises
    ------
    NotGuarded
        The table does not exist or keeps no digests; the message says what to do.
    """
    table = target_identifier(spec)
    with engine.begin() as conn, pg_cursor(conn) as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        name = table.as_string(cur)
        cur.execute(
            "SELECT reprocess.digest_text_sql(to_regclass(%(t)s), '_t'), d.\"rows\", d.digest_sum "
            "FROM (SELECT 1) AS _ LEFT JOIN reprocess.stored_digests d ON d.relid = to_regclass(%(t)s)",
            {"t": name},
        )
        text_sql, recorded, recorded_sum = one_row(cur)
        if text_sql is None or recorded is None:
            raise NotGuarded(
                f"{spec.name}: {spec.qualified_target} keeps no row digests (the table is missing, or was created "
                "before the tamper check and not migrated): run `reprocess init` to apply the migrations."
            )
        digest = sql.SQL("reprocess.row_digest({})").format(sql.SQL(text_sql))  # composed by the catalog, quoted
        with pinned_output(cur):
            cur.execute(
                sql.SQL(
                    "SELECT count(*), count(_digest), coalesce(sum(_digest), 0), "
                    "count(*) FILTER (WHERE _digest <> {digest}) FROM {table} AS _t"
                ).format(digest=digest, table=table)
            )
            rows, signed, signed_sum, changed = one_row(cur)
            changed_keys = _keys(cur, spec, sql.SQL("_digest <> {}").format(digest)) if changed else []
        unsigned = int(rows) - int(signed)
        inserted_keys = _keys(cur, spec, sql.SQL("_digest IS NULL")) if unsigned else []
    missing = int(recorded) - int(signed)
    return StoredCheck(
        pipeline=spec.name,
        table=spec.qualified_target,
        rows=int(rows),
        recorded_rows=int(recorded),
        changed=int(changed),
        removed=max(missing, 0),
        inserted=unsigned + max(-missing, 0),
        sum_differs=missing == 0 and Decimal(signed_sum) != Decimal(recorded_sum),
        changed_keys=changed_keys,
        inserted_keys=inserted_keys,
    )


def _keys(cur: Any, spec: PipelineSpec, where: sql.Composable) -> list[str]:
    """A few keys of the rows ``where`` holds, as ``key|key`` text."""
    cur.execute(
        sql.SQL("SELECT concat_ws('|', {key}) FROM {table} AS _t WHERE {where} ORDER BY {order} LIMIT {n}").format(
            key=sql.SQL(", ").join(sql.SQL("_t.{}::text").format(sql.Identifier(k)) for k in spec.key),
            table=target_identifier(spec),
            where=where,
            order=sql.SQL(", ").join(sql.SQL("_t.{}").format(sql.Identifier(k)) for k in spec.key),
            n=sql.Literal(EXAMPLES),
        )
    )
    return [str(k) for (k,) in cur.fetchall()]


def format_stored(check: StoredCheck) -> str:
    """The verdict as an on-call engineer reads it: what was found, a few keys, what to do."""
    head = f"{check.pipeline}: stored check of {check.table}: {check.rows:,} rows"
    if check.ok:
        return f"{head}, each as the product wrote it; none removed or added outside it: ok"
    lines = [f"{head}: TAMPERED"]
    if check.changed:
        lines.append(f"  changed outside the product: {check.changed:,} rows (keys {', '.join(check.changed_keys)})")
    if check.removed:
        lines.append(f"  removed outside the product: {check.removed:,} rows (the product wrote "
                     f"{check.recorded_rows:,})")  # fmt: skip
    if check.inserted:
        keys = f" (keys {', '.join(check.inserted_keys)})" if check.inserted_keys else ""
        lines.append(f"  inserted outside the product: {check.inserted:,} rows{keys}")
    if check.sum_differs:
        lines.append("  rows replaced outside the product: the count matches, the digests' sum does not")
    lines.append(f"  `reprocess audit {check.pipeline}` says which rows differ from the log; `--heal` rewrites them.")
    return "\n".join(lines)
