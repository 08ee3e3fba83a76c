-- Issue 58 item 1 (review V finding 10): what a run's report and a window's check ask of a target
-- without reading the whole table.
--
-- * reprocess.version_rows keeps, per target table and spec version, how many rows that version
--   derived. Every run's `report` task said it with `SELECT _spec_version, count(*) ... GROUP BY 1`,
--   a scan of the whole target per run; the daily check asks it first ("is any row of another
--   version left?"), so it reads the target only while one is. Statement triggers keep it in the
--   transaction that writes the rows, from their transition tables (the rows the statement touched:
--   the cost follows the change). Unlike the digests' sums (026) they count every write, the
--   product's or by hand: a count is only useful exact. Per table OID, like stored_digests, so a
--   rebuild's shadow keeps its own and takes the live name at the swap with them. `spec_version`
--   NULL: rows from before spec versions.
-- * An index on each target's lineage (_kafka_topic, _kafka_partition, _kafka_offset): the rows a
--   window's records wrote, for its spec-version check (one pass per window, reprocess.postgres.evolve),
--   and the rows a replay's ranges wrote, for its re-derivation (merge.underived_sql). The rebuild's
--   shadow gets it at the swap, with the live table's other indexes (postgres.attached.carry_over).
-- Existing targets get both here: their counts from one scan each, once. Idempotent.

CREATE TABLE IF NOT EXISTS reprocess.version_rows (
    relid oid NOT NULL,       -- the target table (follows it through renames)
    spec_version int,         -- NULL: rows written before spec versions were recorded
    "rows" bigint NOT NULL,   -- rows of the table that version derived (0 once none is left)
    CONSTRAINT version_rows_key UNIQUE NULLS NOT DISTINCT (relid, spec_version)
);

-- The rows a statement touched, by version, into the counts. One function for the four events (each
-- trigger names only the transition tables its event has); upserts in version order, so two writers of
-- one table take the count rows' locks in the same order.
CREATE OR REPLACE FUNCTION reprocess.count_version_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE reprocess.version_rows SET "rows" = 0 WHERE relid = TG_RELID;
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO reprocess.version_rows AS v (relid, spec_version, "rows")
        SELECT TG_RELID, _spec_version, count(*) FROM _new GROUP BY 2 ORDER BY 2
            ON CONFLICT (relid, spec_version) DO UPDATE SET "rows" = v."rows" + EXCLUDED."rows";
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO reprocess.version_rows AS v (relid, spec_version, "rows")
        SELECT TG_RELID, _spec_version, -count(*) FROM _old GROUP BY 2 ORDER BY 2
            ON CONFLICT (relid, spec_version) DO UPDATE SET "rows" = v."rows" + EXCLUDED."rows";
    ELSE  -- UPDATE: most rows keep their version (a newer record under the same spec): no change for them
        INSERT INTO reprocess.version_rows AS v (relid, spec_version, "rows")
        SELECT TG_RELID, n.spec_version, sum(n.d) FROM (
                   SELECT _spec_version AS spec_version, count(*) AS d FROM _new GROUP BY 1
                   UNION ALL SELECT _spec_version, -count(*) FROM _old GROUP BY 1) AS n
         GROUP BY 2 HAVING sum(n.d) <> 0 ORDER BY 2
            ON CONFLICT (relid, spec_version) DO UPDATE SET "rows" = v."rows" + EXCLUDED."rows";
    END IF;
    RETURN NULL;
END $$;

-- Give a target its counts: the triggers and (once: a table that has no trigger yet) its rows' counts.
-- The triggers come first: they lock the table against writes until the caller's transaction ends, so
-- the count taken next is exact. Counts left under the OID by a dropped table are replaced.
-- Called by create_target_sql for every target and shadow, and below for the existing ones.
CREATE OR REPLACE FUNCTION reprocess.count_versions(rel regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = rel AND tgname = 'reprocess_version_rows_inserted') THEN
        RETURN;
    END IF;
    EXECUTE 'CREATE TRIGGER reprocess_version_rows_inserted AFTER INSERT ON ' || rel || ' '
            'REFERENCING NEW TABLE AS _new FOR EACH STATEMENT EXECUTE FUNCTION reprocess.count_version_rows()';
    EXECUTE 'CREATE TRIGGER reprocess_version_rows_updated AFTER UPDATE ON ' || rel || ' '
            'REFERENCING OLD TABLE AS _old NEW TABLE AS _new FOR EACH STATEMENT '
            'EXECUTE FUNCTION reprocess.count_version_rows()';
    EXECUTE 'CREATE TRIGGER reprocess_version_rows_deleted AFTER DELETE ON ' || rel || ' '
            'REFERENCING OLD TABLE AS _old FOR EACH STATEMENT EXECUTE FUNCTION reprocess.count_version_rows()';
    EXECUTE 'CREATE TRIGGER reprocess_version_rows_truncated AFTER TRUNCATE ON ' || rel || ' '
            'FOR EACH STATEMENT EXECUTE FUNCTION reprocess.count_version_rows()';
    DELETE FROM reprocess.version_rows WHERE relid = rel;
    EXECUTE 'INSERT INTO reprocess.version_rows (relid, spec_version, "rows") SELECT ' || rel::oid
            || ', _spec_version, count(*) FROM ' || rel || ' GROUP BY 2';
END $$;

DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT p.target_table FROM reprocess.pipelines p WHERE to_regclass(p.target_table) IS NOT NULL
             UNION SELECT p.target_table || '__rebuild' FROM reprocess.pipelines p
                    WHERE to_regclass(p.target_table || '__rebuild') IS NOT NULL LOOP
        PERFORM reprocess.count_versions(t::regclass);
    END LOOP;
    -- The live targets' lineage index, named as reprocess.postgres.target.lineage_index_sql names it.
    -- (No percent sign in a migration: the driver reads it as a parameter.)
    FOR t IN SELECT 'CREATE INDEX IF NOT EXISTS ' || quote_ident(left(c.relname, 55) || '_lineage') || ' ON '
                    || c.oid::regclass || ' (_kafka_topic, _kafka_partition, _kafka_offset)'
               FROM reprocess.pipelines p JOIN pg_class c ON c.oid = to_regclass(p.target_table) LOOP
        EXECUTE t;
    END LOOP;
END $$;
