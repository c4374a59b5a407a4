"""The layering: core at the bottom, the library and the job beside each other, the program on top."""

from __future__ import annotations

import ast
import re
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


def imported_names(path: Path) -> set[str]:
    """Every module path ``path`` names anywhere: its imports at the top, inside functions (made when called) and
    under ``if TYPE_CHECKING`` (made by a type checker only), and the dotted paths of its string annotations
    (``"gke_ray_tpu.stack.config.StackConfig"``). Each is an arrow: whatever it costs at run time, the module
    cannot be read, tested or moved without the one it names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from package import module`` imports the module; ``from module import name``, the module.
            found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
        for annotation in _annotations(node):
            if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
                found |= set(re.findall(rf"\b{TOP}(?:\.\w+)+", annotation.value))
    return {name for name in found if name == TOP or name.startswith(f"{TOP}.")}


def _annotations(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.arg):
        return [node.annotation] if node.annotation else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.returns] if node.returns else []
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


def imported_packages(path: Path) -> set[str]:
    return {name.split(".")[1] for name in imported_names(path) if name.count(".") and name.split(".")[1] in PACKAGES}


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
    """The package's modules ``path`` names (:func:`imported_names`): a dotted path counts as the longest module it
    starts with (``gke_ray_tpu.stack.config.StackConfig`` is ``gke_ray_tpu.stack.config``)."""
    found = set()
    for name in imported_names(path):
        parts = name.split(".")
        module = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules), None)
        if module is not None:
            found.add(module)
    return found


def module_files() -> dict[str, Path]:
    return {".".join((TOP, *path.relative_to(REPO_ROOT).with_suffix("").parts)).removesuffix(".__init__"): path
            for package in PACKAGES for path in (REPO_ROOT / package).rglob("*.py")}


def test_the_scan_sees_type_only_function_level_and_string_arrows(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from gke_ray_tpu.stack.config import StackConfig\n"
        "def f(plan: 'gke_ray_tpu.stack.plan.StackPlan') -> None:\n"
        "    from gke_ray_tpu.stack import wiring\n"
        "x: 'gke_ray_tpu.preflight.report.PreflightReport'\n"
    )
    modules = set(module_files())
    assert module_imports(source, modules) == {
        "gke_ray_tpu.stack", "gke_ray_tpu.stack.config", "gke_ray_tpu.stack.plan", "gke_ray_tpu.stack.wiring",
        "gke_ray_tpu.preflight.report",
    }
    assert imported_packages(source) == {"stack", "preflight"}


def test_no_module_imports_itself_through_others():
    files = module_files()
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
