"""Benchmarks: the product against its ceilings and a hand-written baseline, in ONE run.

``python -m bench`` (``make bench``). Every case reads the same Kafka data (or, for the
Postgres ceiling, the same parsed rows) produced at the start of the run and writes into its
own empty target table in the database ``reprocess_bench``; results print as records/s and as
ratios side by side (STYLE rule 17) and go to ``docs/benchmarks.md`` and, raw, to
``bench/results/<tag>.json``.

Modules: ``data`` (the order events), ``context`` (the bench database, per-case specs, the
result type), ``consume`` (the one Kafka consume loop of the ceiling and the baseline),
``rss`` (peak memory of a case's processes), one module per case (``ceilings``, ``baseline``,
``product``, ``airflow``), ``report`` (tables and ratios) and ``cli`` (the run).
``coverage`` stands apart: ``python -m bench.coverage`` seeds 100 partitions × 10,000 runs of
bookkeeping and times the coverage page's queries.
"""
