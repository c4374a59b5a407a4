"""The README says what the code does: its config table is the config model's, its commands exist."""

from __future__ import annotations

import re

from stack.config import StackConfig
from stack.readme import config_table
from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def test_the_config_table_is_rendered_from_the_config_model():
    assert config_table() in README
    rows = [line for line in config_table().splitlines()[2:]]
    assert len(rows) == len(StackConfig.model_fields)


def test_every_python_module_the_readme_runs_exists():
    modules = set(re.findall(r"python -m ([a-z_.]+)", README)) - {"venv", "pytest"}
    assert modules == {"training.submit", "training.report", "stack.preview", "training.worker.trainer"}
    for module in modules:
        assert (REPO_ROOT / (module.replace(".", "/") + ".py")).is_file(), module


def test_every_path_in_the_layout_table_exists():
    layout = README[README.index("## Layout"):README.index("## Deploy on your own project")]
    for path in re.findall(r"^\| `([^`]+)`", layout, flags=re.M):
        assert (REPO_ROOT / path).exists(), path
