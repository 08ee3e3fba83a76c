"""Operations a user asks for: plan a run, reconcile a window, rebuild, reset, redrive dead
letters, mirror the ledger to the consumer group, coverage and run summaries. Imports core,
kafka, postgres and checks; never Airflow or Spark."""
