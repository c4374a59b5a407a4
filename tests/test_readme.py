"""The README and docs/ say what the code does: the config table is the config model's, the commands
they run exist, the layout's paths exist, and every relative link (file and heading) resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gke_ray_tpu.stack.config import StackConfig
from gke_ray_tpu.stack.readme import config_table
from tests.conftest import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "bench" / "README.md"]
DEPLOY = (REPO_ROOT / "docs" / "deploy.md").read_text()
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_config_table_is_rendered_from_the_config_model():
    assert config_table() in DEPLOY
    rows = [line for line in config_table().splitlines()[2:]]
    assert len(rows) == len(StackConfig.model_fields)


def test_every_python_module_the_docs_run_exists():
    text = "\n".join(page.read_text() for page in PAGES)
    modules = set(re.findall(r"python -m ([a-z_.]+)", text)) - {"venv", "pytest"}
    assert {"gke_ray_tpu.training.submit", "gke_ray_tpu.training.report", "gke_ray_tpu.stack.preview", "gke_ray_tpu.training.worker.trainer"} <= modules
    for module in modules:
        assert (REPO_ROOT / (module.replace(".", "/") + ".py")).is_file(), module


def test_every_path_in_the_layout_table_exists():
    components = (REPO_ROOT / "docs" / "components.md").read_text()
    layout = components[components.index("## Layout"):]
    paths = re.findall(r"^\| `([^`]+)`", layout, flags=re.M)
    assert paths
    for path in paths:
        for one in re.split(r"`, `", path):
            assert (REPO_ROOT / one).exists(), one


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lowercased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(page):
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name}: {target} (anchors: {sorted(anchors(resolved))})"
