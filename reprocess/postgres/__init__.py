"""PostgreSQL: engines and migrations (``db``), the bookkeeping queries and run store, the target
and stage tables, the commit transaction, schema evolution and batches. Imports core."""
