-- The broker's id of the topic incarnation each snapshot saw: a topic deleted and re-created
-- under its name (or migrated to another cluster) gets a new id, and its offsets start over.
ALTER TABLE reprocess.offset_snapshots ADD COLUMN IF NOT EXISTS topic_id text;
