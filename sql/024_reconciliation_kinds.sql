-- A verdict's gap kinds as values (the kind of each reprocess.checks check that found something:
-- 'uncovered', 'missing', 'older', 'dead letters unrecorded', 'spec version', 'values differ',
-- 'values incomplete'), written by the check itself; the calendar, `reprocess status` and the coverage
-- page read them as stored. The verdicts recorded before this column existed get theirs once, here,
-- from the phrase each kind's detail starts with (the only place the prose is read for a kind).
ALTER TABLE reprocess.reconciliations ADD COLUMN IF NOT EXISTS kinds text[] NOT NULL DEFAULT '{}';
ALTER TABLE reprocess.reconciliation_history ADD COLUMN IF NOT EXISTS kinds text[] NOT NULL DEFAULT '{}';

CREATE TEMP TABLE _reprocess_gap_phrases (n int, kind text, phrase text) ON COMMIT DROP;
INSERT INTO _reprocess_gap_phrases VALUES
    (1, 'uncovered', 'uncovered offsets'),
    (2, 'missing', 'keys missing from the target'),
    (3, 'older', 'stale: '),
    (4, 'dead letters unrecorded', 'invalid records not in the dead letters'),
    (5, 'spec version', '; current is v'),
    (6, 'values differ', 'rows differ from what their newest record derives'),
    (7, 'values incomplete', 'values incomplete');

UPDATE reprocess.reconciliations r
   SET kinds = ARRAY(SELECT p.kind FROM _reprocess_gap_phrases p WHERE strpos(r.detail, p.phrase) > 0 ORDER BY p.n)
 WHERE r.verdict = 'gap' AND r.kinds = '{}';
UPDATE reprocess.reconciliation_history r
   SET kinds = ARRAY(SELECT p.kind FROM _reprocess_gap_phrases p WHERE strpos(r.detail, p.phrase) > 0 ORDER BY p.n)
 WHERE r.verdict = 'gap' AND r.kinds = '{}';
DROP TABLE _reprocess_gap_phrases;
