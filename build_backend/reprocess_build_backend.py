"""The package's PEP 517 build backend: setuptools', with the JSON decoder's jar built into the
package first (:mod:`json_jar`), so a wheel and an sdist carry ``reprocess/jvm/reprocess-json.jar``.

An editable install (``make install``) builds no jar here: scripts/bootstrap.sh builds it with the
venv's pyspark right after, and again whenever the source changes.
"""

from __future__ import annotations

from typing import Any

import json_jar
from setuptools import build_meta as _setuptools

build_editable = _setuptools.build_editable
get_requires_for_build_editable = _setuptools.get_requires_for_build_editable
prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable
prepare_metadata_for_build_wheel = _setuptools.prepare_metadata_for_build_wheel


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    """setuptools' requirements, and the pinned pyspark when the jar must be compiled."""
    return [*_setuptools.get_requires_for_build_wheel(config_settings), *json_jar.build_requires()]


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    """As for a wheel: the sdist carries the jar, so building a wheel from it needs no JDK."""
    return [*_setuptools.get_requires_for_build_sdist(config_settings), *json_jar.build_requires()]


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    json_jar.build()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    json_jar.build()
    return _setuptools.build_sdist(sdist_directory, config_settings)
