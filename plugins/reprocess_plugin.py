"""Registers the reprocess plugin (coverage page, run-note listener) from the installed package.

The plugin lives in :mod:`reprocess.airflow.plugin`; this file only makes Airflow's plugins
folder find it until the package registers it through its entry point.
"""

from reprocess.airflow.plugin import ReprocessPlugin

__all__ = ["ReprocessPlugin"]
