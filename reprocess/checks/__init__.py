"""Reconciliation's checks: one module per kind of gap a window can have, each a :class:`~reprocess.checks.base.Check`
(its query, its typed result, its kind, its heal range), run over a window's stage in one transaction by
:func:`reprocess.checks.verdict.judge` (``reprocess.operations.reconcile.record_verdicts`` calls it).

A verdict stores the kinds its checks found as values (``reprocess.reconciliations.kinds``); the calendar,
``reprocess status`` and the coverage page show them as they are stored. Imports core and postgres.

How to add a check
------------------
1. Write ``reprocess/checks/<name>.py``: a class with ``kind`` (the label stored and shown, e.g.
   ``"values differ"``), ``query`` (a :class:`~reprocess.checks.base.Query`: its SQL over the window's stage,
   the target and the ledger, returning one typed result per partition; a query two checks read, such as
   the key check's, is run once), ``detail(result)`` (what a person reads, ``None`` when it found nothing)
   and ``heal(result, window, left_out)`` (the offsets whose backfill closes its gap: ``window`` for the whole
   window, ``None`` for no range of its own), and a module constant ``CHECK`` holding one instance.
2. Add ``<name>.CHECK`` to :data:`reprocess.checks.registry.CHECKS`, where it falls in a verdict's detail.

``tests/unit/checks/test_checks.py`` fails until a module of this folder is registered; its detail, kind and heal
get a row there. The infrastructure modules are ``base``, ``registry`` and ``verdict``.
"""
