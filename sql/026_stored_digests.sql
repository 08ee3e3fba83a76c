-- Issue 57 item 3, the tamper check (`reprocess audit --stored`, reprocess/operations/tamper.py):
-- every row of a target carries `_digest`, a 64-bit digest of its values, and the product keeps, per
-- target table, how many rows carry one and the sum of their digests (reprocess.stored_digests).
--
-- * A row's digest covers every column but `_run_id`, `_updated_at` and `_digest` itself (payload,
--   Kafka lineage, spec version), each as `name=` || its text, NULL columns left out (a column
--   added later, NULL in old rows, leaves their digests right), names in byte order. The text is
--   the type's output under pinned settings (TimeZone UTC, ISO dates, ...), so the session that
--   writes and the one that checks render alike. The merge computes it in its own statement
--   (reprocess/postgres/digest.py builds the same text from the spec); any other row the product
--   writes without one gets it from the trigger below.
-- * Only the product's own transactions (reprocess.writer = 'on', set locally by the commit
--   protocol) keep digests and sums: an UPDATE by hand leaves the old digest (the check recomputes
--   it and finds the row changed), a DELETE by hand leaves the sum (the check finds a row removed),
--   an INSERT by hand has no digest (found as inserted).
-- * The count and sum live per table OID, so a rebuild's shadow keeps its own and takes the live
--   name at the swap with them. The sum is numeric: order-independent, exact, no overflow.
-- Existing targets get the column, their triggers and their rows' digests here. Idempotent.

CREATE OR REPLACE FUNCTION reprocess.row_digest(t text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ('x' || left(md5(t), 16))::bit(64)::bigint $$;

CREATE TABLE IF NOT EXISTS reprocess.stored_digests (
    relid oid PRIMARY KEY,                 -- the target table (follows it through renames)
    "rows" bigint NOT NULL DEFAULT 0,      -- rows the product wrote that hold a digest
    digest_sum numeric NOT NULL DEFAULT 0, -- the sum of their digests
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The text a row's digest is taken of, as SQL over `alias` (the mirror of digest.py's digest_text).
CREATE OR REPLACE FUNCTION reprocess.digest_text_sql(rel regclass, alias text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(string_agg('coalesce(' || quote_literal(a.attname || '=') || ' || quote_literal('
                               || quote_ident(alias) || '.' || quote_ident(a.attname) || ') || '','', '''')',
                               ' || ' ORDER BY a.attname COLLATE "C"), '''''')
      FROM pg_attribute a
     WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
       AND a.attname NOT IN ('_run_id', '_updated_at', '_digest')
$$;

-- A row the product writes without a digest (any statement but the merge, which writes its own).
CREATE OR REPLACE FUNCTION reprocess.digest_row() RETURNS trigger
    LANGUAGE plpgsql
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
    AS $$
DECLARE
    digest bigint;
BEGIN
    EXECUTE 'SELECT reprocess.row_digest(' || reprocess.digest_text_sql(TG_RELID, '_r')
            || ') FROM (SELECT ($1).*) AS _r' INTO digest USING NEW;
    NEW._digest := digest;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION reprocess.digests_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('reprocess.writer', true) = 'on' THEN
        UPDATE reprocess.stored_digests s SET "rows" = s."rows" + n.c, digest_sum = s.digest_sum + n.t, updated_at = now()
          FROM (SELECT count(_digest) AS c, coalesce(sum(_digest), 0) AS t FROM _new) n
         WHERE s.relid = TG_RELID AND n.c > 0;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION reprocess.digests_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('reprocess.writer', true) = 'on' THEN
        UPDATE reprocess.stored_digests s SET "rows" = s."rows" + n.c - o.c, digest_sum = s.digest_sum + n.t - o.t,
               updated_at = now()
          FROM (SELECT count(_digest) AS c, coalesce(sum(_digest), 0) AS t FROM _new) n,
               (SELECT count(_digest) AS c, coalesce(sum(_digest), 0) AS t FROM _old) o
         WHERE s.relid = TG_RELID AND (n.c, n.t) IS DISTINCT FROM (o.c, o.t);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION reprocess.digests_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('reprocess.writer', true) = 'on' THEN
        UPDATE reprocess.stored_digests s SET "rows" = s."rows" - o.c, digest_sum = s.digest_sum - o.t, updated_at = now()
          FROM (SELECT count(_digest) AS c, coalesce(sum(_digest), 0) AS t FROM _old) o
         WHERE s.relid = TG_RELID AND o.c > 0;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION reprocess.digests_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('reprocess.writer', true) = 'on' THEN
        UPDATE reprocess.stored_digests SET "rows" = 0, digest_sum = 0, updated_at = now() WHERE relid = TG_RELID;
    END IF;
    RETURN NULL;
END $$;

-- Give a target its digests: the column, the triggers, and (once) its rows' digests and sum.
-- Called by create_target_sql for every target and shadow, and below for the existing ones.
CREATE OR REPLACE FUNCTION reprocess.guard_target(rel regclass) RETURNS void
    LANGUAGE plpgsql
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
    AS $$
DECLARE
    writer text := current_setting('reprocess.writer', true);
BEGIN
    EXECUTE 'ALTER TABLE ' || rel || ' ADD COLUMN IF NOT EXISTS _digest bigint';
    EXECUTE 'CREATE OR REPLACE TRIGGER reprocess_digest_insert BEFORE INSERT ON ' || rel || ' FOR EACH ROW '
                   'WHEN (NEW._digest IS NULL AND current_setting(''reprocess.writer'', true) = ''on'') '
                   'EXECUTE FUNCTION reprocess.digest_row()';
    EXECUTE 'CREATE OR REPLACE TRIGGER reprocess_digest_update BEFORE UPDATE ON ' || rel || ' FOR EACH ROW '
                   'WHEN (NEW._digest IS NOT DISTINCT FROM OLD._digest '
                   'AND current_setting(''reprocess.writer'', true) = ''on'') '
                   'EXECUTE FUNCTION reprocess.digest_row()';
    EXECUTE 'CREATE OR REPLACE TRIGGER reprocess_digests_inserted AFTER INSERT ON ' || rel || ' '
                   'REFERENCING NEW TABLE AS _new FOR EACH STATEMENT EXECUTE FUNCTION reprocess.digests_inserted()';
    EXECUTE 'CREATE OR REPLACE TRIGGER reprocess_digests_updated AFTER UPDATE ON ' || rel || ' '
                   'REFERENCING OLD TABLE AS _old NEW TABLE AS _new FOR EACH STATEMENT '
                   'EXECUTE FUNCTION reprocess.digests_updated()';
    EXECUTE 'CREATE OR REPLACE TRIGGER reprocess_digests_deleted AFTER DELETE ON ' || rel || ' '
                   'REFERENCING OLD TABLE AS _old FOR EACH STATEMENT EXECUTE FUNCTION reprocess.digests_deleted()';
    EXECUTE 'CREATE OR REPLACE TRIGGER reprocess_digests_truncated AFTER TRUNCATE ON ' || rel || ' '
                   'FOR EACH STATEMENT EXECUTE FUNCTION reprocess.digests_truncated()';
    IF NOT EXISTS (SELECT 1 FROM reprocess.stored_digests WHERE relid = rel) THEN
        INSERT INTO reprocess.stored_digests (relid) VALUES (rel);
        PERFORM set_config('reprocess.writer', 'on', true);
        EXECUTE 'UPDATE ' || rel || ' SET _digest = NULL WHERE _digest IS NULL';  -- the trigger digests them
        PERFORM set_config('reprocess.writer', coalesce(writer, ''), true);
    END IF;
END $$;

DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT p.target_table FROM reprocess.pipelines p WHERE to_regclass(p.target_table) IS NOT NULL
             UNION SELECT p.target_table || '__rebuild' FROM reprocess.pipelines p
                    WHERE to_regclass(p.target_table || '__rebuild') IS NOT NULL LOOP
        PERFORM reprocess.guard_target(t::regclass);
    END LOOP;
END $$;
