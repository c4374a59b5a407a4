"""The README and docs/ say what the code does: the config table is the config model's, the commands
they run exist, the layout's paths exist, and every relative link (file and heading) resolves."""

from __future__ import annotations

import importlib.util
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
        assert importlib.util.find_spec(module) is not None, module


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


def test_the_readmes_first_pulumi_up_is_what_preview_prints_for_its_steps(dev_config):
    """The README quotes preview's last lines for the dev stack as its quick start sets it (flex-start)."""
    from gke_ray_tpu.stack.parse import parse_stack_config
    from gke_ray_tpu.stack.checks import check_declared_runs, check_idle_cost, first_up
    from gke_ray_tpu.stack.plan import plan_stack
    from tests.conftest import with_keys

    readme = (REPO_ROOT / "README.md").read_text()
    quoted = re.search(r"```text\n(What the first `pulumi up` starts.*?)\n```", readme, flags=re.S)
    assert quoted, "README.md quotes no preview lines"
    cfg = parse_stack_config(with_keys(dev_config, capacity="flex-start"))
    said = first_up(cfg, check_idle_cost(cfg, info=lambda _: None, warn=lambda _: None),
                    check_declared_runs(plan_stack(cfg), info=lambda _: None))
    assert quoted.group(1) == said


def test_every_page_links_every_page_in_its_navigation_line():
    """The line at the top of each page lists the pages the README's table lists, in that order."""
    readme = (REPO_ROOT / "README.md").read_text()
    table = readme[readme.index("## Read more"):]
    listed = [Path(target).name for target in _LINK.findall(table)]
    for page in [*sorted((REPO_ROOT / "docs").glob("*.md"))]:
        first = page.read_text().splitlines()[0]
        linked = [Path(target).name for target in _LINK.findall(first)]
        assert linked[1:] == listed, page.name


WORDS = 15_000
"""The most the pages a person reads (the README and docs/) may hold together; the benches' guide is apart."""


def test_the_pages_a_person_reads_hold_at_most_15000_words():
    pages = [page for page in PAGES if page.parent.name != "bench"]
    words = {page.name: len(page.read_text().split()) for page in pages}
    assert sum(words.values()) <= WORDS, sorted(words.items(), key=lambda item: -item[1])


def quoted_output(page: str, first: str) -> str:
    """The fenced block of ``page`` whose first line starts with ``first``: output the page quotes."""
    found = re.search(rf"```\n({re.escape(first)}.*?)\n```", (REPO_ROOT / page).read_text(), flags=re.S)
    assert found, f"{page} quotes no block starting {first!r}"
    return found.group(1)


def test_the_quoted_cost_and_cold_start_are_what_preview_prints(dev_config):
    """deploy.md quotes the cost per capacity mode of the dev stack with flex-start, image.md its cold start: the
    first lines of what preview prints."""
    from gke_ray_tpu.stack.checks import check_cold_start, check_idle_cost
    from gke_ray_tpu.stack.parse import parse_stack_config
    from tests.conftest import with_keys

    said: list[str] = []
    check_idle_cost(parse_stack_config(with_keys(dev_config, capacity="flex-start")), info=said.append,
                    warn=lambda _: None)
    assert any((text + "\n").startswith(quoted_output("docs/deploy.md", "Stack cost per capacity mode") + "\n")
               for text in said)
    said.clear()
    check_cold_start(parse_stack_config(dev_config), info=said.append)
    assert any((text + "\n").startswith(quoted_output("docs/image.md", "Cold start of each TPU host") + "\n")
               for text in said)
