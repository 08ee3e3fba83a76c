-- Spec versions (v1, v2, ...): a fingerprint of a pipeline's columns, types, mapping, key and
-- ordering. Target rows carry the version that derived them (_spec_version), so rows derived
-- by an older spec are reported instead of being called ok.
CREATE TABLE IF NOT EXISTS reprocess.spec_versions (
    pipeline       text NOT NULL REFERENCES reprocess.pipelines (name),
    version        int  NOT NULL,
    fingerprint    text NOT NULL,
    spec           jsonb NOT NULL,
    registered_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, version),
    UNIQUE (pipeline, fingerprint)
);
-- The version the live target table is at (moved by a compatible migration or a rebuild's swap).
ALTER TABLE reprocess.pipelines ADD COLUMN IF NOT EXISTS spec_version int;
-- The version a run was planned with: a commit under another spec is refused, not half-applied.
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS spec_version int;
