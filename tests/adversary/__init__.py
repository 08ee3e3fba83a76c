"""The adversary (issue 56): seeded pipelines, records, cuts and replays run through the product's real
path and checked after every step against an oracle that imports nothing of the product.

- ``values``: every column type's JSON input rules, PostgreSQL's output and its order, written out here
  from the README's tables and PostgreSQL's documentation (no product code);
- ``model``: a scenario (spec, records, steps) as plain data, and its case-file form;
- ``oracle``: what the table, the dead letters and the ledger must hold after each step;
- ``strategies``: Hypothesis strategies that generate scenarios (shrinkable);
- ``driver``: the one module that runs the product (Kafka, Spark Connect, PostgreSQL) and reads back;
- ``fuzz``: ``make fuzz``'s long run, its report and the case files of what it finds.

``values``, ``model``, ``oracle`` and ``strategies`` import nothing of ``reprocess``
(tests/unit/adversary/test_adversary_oracle.py scans them), so a product bug cannot hide in its own oracle.
"""
