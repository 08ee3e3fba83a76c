"""What hangs off a target table besides its rows, for a rebuild's swap by rename.

PostgreSQL binds grants, indexes, views, foreign keys, triggers, policies and publication
membership to the table's OID, not its name: after ``ALTER TABLE … RENAME`` they stay with the
renamed old table (views serve frozen rows, readers get "permission denied", CDC stops). The
swap (postgres/swap.py) therefore carries over what can be re-created exactly on the new
table — table grants, indexes other than the primary key, a publication's plain membership — and
refuses, naming them, while anything else is attached (:func:`blockers`): the user decides how a
view or a foreign key should see the new table.
"""

from __future__ import annotations

from typing import Final

import psycopg2
from psycopg2 import sql
from sqlalchemy import Connection, text

from reprocess.core.names import kept_index
from reprocess.core.spec import PipelineSpec
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.target import target_identifier

_BLOCKERS: Final = text(
    r"""
SELECT DISTINCT format('%s %s', CASE v.relkind WHEN 'm' THEN 'materialized view' ELSE 'view' END, v.oid::regclass)
  FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class
 WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
   AND d.refobjid = to_regclass(:t) AND v.oid <> to_regclass(:t)
UNION ALL
SELECT format('foreign key %I on %s', conname, conrelid::regclass) FROM pg_constraint
 WHERE contype = 'f' AND to_regclass(:t) IN (conrelid, confrelid)
UNION ALL
SELECT format('trigger %I', tgname) FROM pg_trigger WHERE tgrelid = to_regclass(:t) AND NOT tgisinternal
   AND tgname NOT LIKE 'reprocess\_digest%' AND tgname NOT LIKE 'reprocess\_version\_rows%'  -- the product's
   -- own (sql/026, sql/027): the shadow has its own
UNION ALL
SELECT format('row security policy %I', polname) FROM pg_policy WHERE polrelid = to_regclass(:t)
UNION ALL
SELECT format('publication %I (with a row filter or column list)', p.pubname)
  FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
 WHERE pr.prrelid = to_regclass(:t) AND (pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL)
ORDER BY 1
"""
)
# Table privileges as (privilege, grantee role or NULL for PUBLIC, grantable).
_GRANTS: Final = text(
    "SELECT a.privilege_type, r.rolname, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a "
    "LEFT JOIN pg_roles r ON r.oid = a.grantee WHERE c.oid = to_regclass(:t) AND a.grantee <> c.relowner"
)
# Each index but the primary key: its name, its definition, and the table as the definition names it.
_INDEXES: Final = text(
    "SELECT c.relname, pg_get_indexdef(i.indexrelid), format('%I.%I', n.nspname, t.relname) FROM pg_index i "
    "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
    "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE i.indrelid = to_regclass(:t) AND NOT i.indisprimary "
    "ORDER BY c.relname"
)
_PUBLICATIONS: Final = text(
    "SELECT p.pubname FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid "
    "WHERE pr.prrelid = to_regclass(:t) AND pr.prqual IS NULL AND pr.prattrs IS NULL ORDER BY 1"
)
_PRIVILEGES: Final = frozenset(
    {"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER", "MAINTAIN"}
)


def blockers(conn: Connection, table: str) -> list[str]:
    """What the swap cannot carry over to a new table (``table`` is schema-qualified, quoted)."""
    return list(conn.execute(_BLOCKERS, {"t": table}).scalars())


def carry_over(conn: Connection, live: PipelineSpec, shadow: PipelineSpec, stamp: str) -> list[str]:
    """Re-create the live table's grants, extra indexes and publication membership on the shadow.

    Runs in the swap's transaction, before the renames. The live table's indexes are renamed
    with ``stamp`` (they stay on the old table) so the shadow's take their names. Returns the
    indexes that do not fit the shadow (a column dropped or retyped), each with Postgres' reason;
    the caller refuses the swap then, and the transaction's rollback undoes every step.
    """
    live_table, shadow_table = target_identifier(live), target_identifier(shadow)
    with pg_cursor(conn) as cur:
        live_name, shadow_name = live_table.as_string(cur), shadow_table.as_string(cur)
        for privilege, role, grantable in conn.execute(_GRANTS, {"t": live_name}):
            if privilege not in _PRIVILEGES:
                continue
            cur.execute(
                sql.SQL("GRANT {} ON {} TO {}{}").format(
                    sql.SQL(privilege), shadow_table, sql.SQL("PUBLIC") if role is None else sql.Identifier(role),
                    sql.SQL(" WITH GRANT OPTION" if grantable else ""),
                )
            )  # fmt: skip
        misfits = []
        for name, definition, on in conn.execute(_INDEXES, {"t": live_name}).all():
            cur.execute(
                sql.SQL("ALTER INDEX {}.{} RENAME TO {}").format(
                    sql.Identifier(live.target_schema), sql.Identifier(name),
                    sql.Identifier(kept_index(name, stamp)),
                )
            )  # fmt: skip
            cur.execute("SAVEPOINT carry_index")
            try:
                cur.execute(definition.replace(f" ON {on} ", f" ON {shadow_name} ", 1))
            except psycopg2.Error as exc:
                cur.execute("ROLLBACK TO SAVEPOINT carry_index")
                misfits.append(f"index {name} ({str(exc).strip().splitlines()[0]})")
        for (publication,) in conn.execute(_PUBLICATIONS, {"t": live_name}).all():
            cur.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(sql.Identifier(publication), shadow_table))
            cur.execute(sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(sql.Identifier(publication), live_table))
    return misfits
