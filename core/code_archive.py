"""The job's code as files: what a declared run ships to the cluster, and a digest that names it.

A run submitted with ``training.submit`` uploads ``core/`` and ``training/``
from the user's checkout (Ray's ``py_modules``). A run declared in the stack
is submitted by the KubeRay operator, which has no files of its own, so the
same two packages go into the checkpoint bucket as one zip under ``_code/``,
named by the digest of their contents; every Ray pod sees the bucket at
``/data`` and puts the zip on ``PYTHONPATH`` (Python imports from zips).
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Iterable

from core.job_spec import DATA_MOUNT, SHIPPED_PACKAGES

SUFFIXES = (".py", ".yml")
ARCHIVE_DIR = "_code"


def package_files(packages: Iterable[str] = SHIPPED_PACKAGES) -> dict[str, Path]:
    """``{path inside the zip: file}`` for every source file of the packages (no caches)."""
    files: dict[str, Path] = {}
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise LookupError(f"package {package} is not importable here")
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*")):
            if path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                files[f"{package}/{path.relative_to(root).as_posix()}"] = path
    return files


def digest(files: dict[str, Path]) -> str:
    """12 hex digits of SHA-256 over the names and contents: the same code, the same archive."""
    hasher = hashlib.sha256()
    for name in sorted(files):
        hasher.update(name.encode() + b"\0" + files[name].read_bytes() + b"\0")
    return hasher.hexdigest()[:12]


def archive_object(code_digest: str) -> str:
    """The archive's object name in the bucket."""
    return f"{ARCHIVE_DIR}/gke-ray-tpu-{code_digest}.zip"


def archive_path(code_digest: str, mount: str = DATA_MOUNT) -> str:
    """Where every Ray pod sees the archive (the bucket is mounted at ``mount``)."""
    return f"{mount}/{archive_object(code_digest)}"
