"""PostgreSQL: engines and migrations (``db``), the bookkeeping queries and run store, the target
and stage tables, the merge and the dead letters, what hangs off a target (``attached``), the
commit transaction, schema evolution and batches. Imports core."""
