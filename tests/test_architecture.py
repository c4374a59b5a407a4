"""The layering: core at the bottom, the library and the job beside each other, the program on top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import PACKAGES, REPO_ROOT

TOP = "gke_ray_tpu"
ALLOWED = {
    "core": set(),
    "components": {"core"},
    "preflight": {"core"},
    "training": {"core"},
    "stack": {"core", "components", "preflight"},
}
"""Which of this repository's packages each may import."""


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found |= {name.split(".")[1] for name in names
                  if name.startswith(f"{TOP}.") and name.split(".")[1] in PACKAGES}
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_what_lies_below_it(package):
    for path in sorted((REPO_ROOT / package).rglob("*.py")):
        others = imported_packages(path) - {package}
        assert others <= ALLOWED[package], f"{path.relative_to(REPO_ROOT)} imports {sorted(others - ALLOWED[package])}"


def test_the_product_does_not_point_at_files_outside_the_repository():
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            assert "../shared" not in path.read_text(), path


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports when it is imported: its top-level imports, not those inside a
    function (made when called) or under ``if TYPE_CHECKING`` (never made)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from package import module`` imports the module; ``from module import name``, the module.
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        found |= {name for name in names if name in modules}
    return found


def test_no_module_imports_itself_through_others():
    files = {".".join((TOP, *path.relative_to(REPO_ROOT).with_suffix("").parts)).removesuffix(".__init__"): path
             for package in PACKAGES for path in (REPO_ROOT / package).rglob("*.py")}
    graph = {module: module_imports(path, set(files)) - {module} for module, path in files.items()}
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(module):] + [module]))
        if module in done:
            return
        for other in sorted(graph[module]):
            visit(other, trail + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
