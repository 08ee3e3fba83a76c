"""The numbered SQL migrations of schema ``reprocess`` (``NNN_*.sql``), applied in order, each once,
by :func:`reprocess.postgres.db.migrate`. Installed as ``reprocess.sql`` (package data)."""
