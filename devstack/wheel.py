"""The ``reprocess`` wheel of this checkout, and a Python environment that runs it.

Used where the library must come from the package as users install it, not from the checkout:
the wheel test, and the standalone cluster's executors. The wheel is built from a copy of the
sources (a stale ``build/`` folder could smuggle deleted files into it). The environment is a
venv with the wheel installed ``--no-deps``; its dependencies are the project venv's, linked
entry by entry into its site-packages, except the project's own (editable) ``reprocess``: its
``.pth`` and its metadata. So ``import reprocess`` finds the wheel's copy, and only the wheel's
entry points (Airflow's provider and plugin discovery, the ``reprocess`` command's metadata) are
seen, once, as on a machine where ``pip install reprocess`` is the only install.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Final

from devstack.process import REPO

# The build backend (pyproject's backend-path) compiles the JSON decoder's jar unless reprocess/ holds a fresh one.
SOURCES: Final = (
    "pyproject.toml",
    "MANIFEST.in",
    "README.md",
    "build_backend",
    "reprocess",
    "spark_apps",
    "sql",
    "plugins",
)


def build(out: Path) -> Path:
    """Build the wheel into ``out`` (pip, isolated build env from pyproject's pinned backend)."""
    with tempfile.TemporaryDirectory(prefix="reprocess-src-") as tmp:
        src = Path(tmp)
        for name in SOURCES:
            if (REPO / name).is_dir():
                shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(REPO / name, src / name)
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("reprocess-*.whl"):
            old.unlink()
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w", str(out)]
        subprocess.run([*cmd, str(src)], check=True)
    (wheel,) = out.glob("reprocess-*.whl")
    return wheel


def install_env(venv: Path, wheel: Path) -> Path:
    """A fresh venv at ``venv`` running ``wheel``; returns its Python."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    for dep in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not (_is_project_install(dep.name) or (site / dep.name).exists()):
            (site / dep.name).symlink_to(dep)
    return python


def _is_project_install(name: str) -> bool:
    """The project venv's editable ``reprocess`` and ``reprocess-devstack``: their import hooks and
    their metadata (entry points: a user's install has neither the checkout nor the dev stack).

    Examples
    --------
    >>> _is_project_install("__editable__.reprocess-0.1.0.pth"), _is_project_install("reprocess-0.1.0.dist-info")
    (True, True)
    >>> _is_project_install("__editable__.reprocess_devstack-0.1.0.pth")
    True
    >>> _is_project_install("reprocess_devstack-0.1.0.dist-info")
    True
    >>> _is_project_install("pyspark")
    False
    """
    return name.startswith(("__editable__.reprocess", "__editable___reprocess_", "reprocess-", "reprocess_devstack-"))
