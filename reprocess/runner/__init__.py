"""Carrying out a run's stages: the evaluator, and the Spark task's entry into it."""
