"""A spec's ``transform:`` whose module the Spark client's Python cannot import: the error names the
module, the Python that must import it and that a running worker or scheduler needs a restart once
it is installed (issue 59, item 7)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from reprocess.core.errors import SpecError
from reprocess.formats.specs import parse_spec
from reprocess.spark import user_transform

EXAMPLE = Path(__file__).parents[3] / "pipelines" / "examples" / "invoices.yaml"


def test_a_transform_module_that_cannot_be_imported_names_the_python_and_says_restart_the_worker() -> None:
    raw = {**yaml.safe_load(EXAMPLE.read_text()), "transform": "no_such_transforms_pkg.fns:v1"}
    spec = parse_spec(raw, "invoices.yaml")
    with pytest.raises(SpecError) as caught:
        user_transform.load(spec)
    message = str(caught.value)
    assert message.startswith("invoices.yaml: field 'transform': 'no_such_transforms_pkg.fns:v1': cannot import "
                              "'no_such_transforms_pkg.fns' (No module named 'no_such_transforms_pkg')")  # fmt: skip
    assert f"importable by {sys.executable}" in message
    assert re.search(r"the Airflow worker's .*scheduler.* for Spark Connect", message), message
    assert re.search(r"restart .*worker.*scheduler.* after installing it", message), message
