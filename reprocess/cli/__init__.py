"""The ``reprocess`` command (``python -m reprocess.cli`` runs the same): one module per command.

``reprocess status [PIPELINE]`` prints each partition's coverage, as ``kafka-consumer-groups
--describe`` prints a group's lag; ``reprocess reset PIPELINE --to-…`` moves a pipeline's ledger
deliberately (dry run unless ``--execute``); ``reprocess redrive PIPELINE`` prints the backfill
confs that re-read a pipeline's open dead letters; ``reprocess validate [SPEC…]`` checks spec
files offline and against the broker, Spark and the target table. Packages add commands through
the ``reprocess.commands`` entry point group: the dev stack's ``demo`` and ``produce``
(``devstack/demo.py``, ``devstack/produce.py``). Exit codes: see :data:`reprocess.cli.common.EXIT_CODES`.

Each command module has ``NAME``, ``SUMMARY``, ``DESCRIPTION``, ``configure(parser)`` (its
arguments) and ``run(args)`` (its exit code); :mod:`reprocess.cli.main` registers them.
"""
