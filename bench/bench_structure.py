"""The repository's structure as its imports draw it, for one or more checkouts side by side.

    .venv/bin/python bench/bench_structure.py [DIR ...]      # default: this checkout

For each checkout (a worktree of any commit, before or after the folders moved to the root) it prints:

- rooms: the packages and subpackages of ``gke_ray_tpu`` (folders of Python files);
- arrows: which package (``core``, ``stack``, ...) imports which, counting every import (at the top, inside a
  function, under ``if TYPE_CHECKING``) and every ``gke_ray_tpu`` path in a string annotation, as
  tests/test_architecture.py does;
- floors: the packages in layers, each above every package it imports (none while the arrows go round);
- circles: modules that import themselves through others (the import graph's strongly connected components);
- modules, and those of 500 or more lines; functions of 50 or more lines, in the rooms' code;
- duplicate pairs: the ``duplicates`` command's count over the whole checkout (tests and benches too);
- words of the docs: the pages a person reads (README.md and docs/) and the benches' guide (bench/README.md).

Read from the files alone: nothing is imported, so a checkout needs no install.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

TOP = "gke_ray_tpu"
LONG_FUNCTION = 50
LONG_MODULE = 500


def package_roots(repo: Path) -> dict[str, Path]:
    """``gke_ray_tpu.<name>`` -> its folder: pyproject.toml's package-dir where it maps them, else the folders of
    Python files under gke_ray_tpu/ (before the move, stack/ had no ``__init__.py``)."""
    mapped = tomllib.loads((repo / "pyproject.toml").read_text()).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    roots = {name: repo / folder for name, folder in mapped.items() if name.startswith(f"{TOP}.")}
    if roots:
        return roots
    return {f"{TOP}.{folder.name}": folder for folder in sorted((repo / TOP).iterdir())
            if folder.is_dir() and folder.name != "__pycache__" and any(folder.rglob("*.py"))}


def module_files(repo: Path) -> dict[str, Path]:
    files = {}
    for package, folder in package_roots(repo).items():
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            files[".".join((package, *path.relative_to(folder).with_suffix("").parts)).removesuffix(".__init__")] = path
    return files


def named_modules(path: Path, module: str, modules: set[str]) -> set[str]:
    """The modules ``path`` names: every import anywhere in it (relative ones resolved) and the ``gke_ray_tpu``
    paths in its string annotations, each as the longest module it starts with."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
            names |= {f"{base}.{alias.name}" for alias in node.names} | {base}
        annotation = getattr(node, "annotation", None) or getattr(node, "returns", None)
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            names |= set(re.findall(rf"\b{TOP}(?:\.\w+)+", annotation.value))
    found = set()
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts), 1, -1):
            if ".".join(parts[:cut]) in modules:
                found.add(".".join(parts[:cut]))
                break
    return found - {module}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def floors(graph: dict[str, set[str]]) -> list[list[str]]:
    """Packages in layers: floor 0 imports no other, each one floor above the highest it imports; empty when the
    arrows go round."""
    level: dict[str, int] = {}
    remaining = dict(graph)
    while remaining:
        ready = {room for room, below in remaining.items() if below <= set(level)}
        if not ready:
            return []
        for room in ready:
            level[room] = 1 + max((level[other] for other in graph[room]), default=-1)
            del remaining[room]
    return [sorted(room for room, n in level.items() if n == floor) for floor in range(max(level.values()) + 1)]


@dataclass
class Structure:
    repo: Path
    rooms: list[str] = field(default_factory=list)
    arrows: dict[str, set[str]] = field(default_factory=dict)
    circles: list[list[str]] = field(default_factory=list)
    long_functions: list[tuple[int, str]] = field(default_factory=list)
    module_lines: dict[str, int] = field(default_factory=dict)
    duplicate_pairs: str = "-"
    user_words: int = 0
    bench_words: int = 0

    @property
    def floors(self) -> list[list[str]]:
        return floors(self.arrows)

    @property
    def long_modules(self) -> list[tuple[int, str]]:
        return sorted(((n, name) for name, n in self.module_lines.items() if n >= LONG_MODULE), reverse=True)

    @property
    def arrow_count(self) -> int:
        return sum(len(targets) for targets in self.arrows.values())


def package(module: str) -> str:
    return module.split(".")[1]


def room_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def measure(repo: Path, duplicates_seconds: int) -> Structure:
    files = module_files(repo)
    graph = {module: named_modules(path, module, set(files)) for module, path in files.items()}
    rooms = {room_of(module, path).removeprefix(f"{TOP}.") for module, path in files.items()}
    arrows: dict[str, set[str]] = {package(module): set() for module in files}
    for module, targets in graph.items():
        arrows[package(module)] |= {package(target) for target in targets} - {package(module)}
    long = []
    module_lines = {str(path.relative_to(repo)): len(path.read_text().splitlines()) for path in files.values()}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines >= LONG_FUNCTION:
                    long.append((lines, f"{path.relative_to(repo)}:{node.lineno} {node.name}"))
    pages = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    return Structure(
        repo=repo,
        rooms=sorted(rooms),
        arrows=arrows,
        circles=cycles(graph),
        long_functions=sorted(long, reverse=True),
        module_lines=module_lines,
        duplicate_pairs=duplicate_pairs(repo, duplicates_seconds),
        user_words=sum(len(page.read_text().split()) for page in pages if page.is_file()),
        bench_words=len((repo / "bench" / "README.md").read_text().split()) if (repo / "bench" / "README.md").is_file() else 0,
    )


def duplicate_pairs(repo: Path, seconds: int) -> str:
    """The pair count of ``duplicates`` over the checkout (a tool of this machine; "-" where it is missing)."""
    if shutil.which("duplicates") is None:
        return "-"
    result = subprocess.run(["duplicates", "--repo", str(repo), "--seconds", str(seconds)], capture_output=True,
                            text=True)
    first = result.stdout.splitlines()[0] if result.stdout else ""
    if first.startswith("no duplicates"):
        return "0"
    match = re.match(r"(\d+) pairs? of places", first)
    incomplete = " (incomplete)" if "incomplete:" in result.stdout else ""
    return (match.group(1) if match else "?") + incomplete


def report(structures: list[Structure]) -> str:
    names = [str(s.repo) for s in structures]
    rows = [
        ("rooms (packages and subpackages)", [len(s.rooms) for s in structures]),
        ("floors", [len(s.floors) or "none: packages in a circle" for s in structures]),
        ("arrows between packages", [s.arrow_count for s in structures]),
        ("circles (module cycles)", [len(s.circles) for s in structures]),
        (f"modules ({LONG_MODULE}+ lines)", [f"{len(s.module_lines)} ({len(s.long_modules)})" for s in structures]),
        (f"functions of {LONG_FUNCTION}+ lines", [len(s.long_functions) for s in structures]),
        ("duplicate pairs (duplicates)", [s.duplicate_pairs for s in structures]),
        ("words: README.md + docs/", [s.user_words for s in structures]),
        ("words: bench/README.md", [s.bench_words for s in structures]),
    ]
    lines = ["| figure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {label} | " + " | ".join(str(value) for value in values) + " |" for label, values in rows]
    for s in structures:
        lines += ["", f"## {s.repo}", "", "floors (bottom first):"]
        lines += [f"  {n}: {', '.join(packages)}" for n, packages in enumerate(s.floors)] or ["  none: the arrows go round"]
        lines.append("rooms: " + ", ".join(s.rooms))
        lines.append("arrows:")
        lines += [f"  {name} -> {', '.join(sorted(targets))}" for name, targets in sorted(s.arrows.items()) if targets]
        lines.append("circles:" if s.circles else "circles: none")
        lines += ["  " + " <-> ".join(circle) for circle in s.circles]
        lines.append(f"modules of {LONG_MODULE}+ lines:")
        lines += [f"  {count:4d} {name}" for count, name in s.long_modules]
        lines.append(f"functions of {LONG_FUNCTION}+ lines:")
        lines += [f"  {count:4d} {where}" for count, where in s.long_functions]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repos", nargs="*", type=Path, default=[Path(__file__).resolve().parent.parent],
                        help="checkouts to measure (default: this one)")
    parser.add_argument("--duplicates-seconds", type=int, default=120, help="time the duplicates command may take")
    args = parser.parse_args()
    print(report([measure(repo.resolve(), args.duplicates_seconds) for repo in args.repos]))


if __name__ == "__main__":
    main()
