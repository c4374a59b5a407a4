"""The job's code as files: what a declared run ships to the cluster, and a digest that names it.

A run submitted with ``gke_ray_tpu.training.submit`` uploads ``gke_ray_tpu.core`` and ``gke_ray_tpu.training``
(``core/`` and ``training/`` of the user's checkout) as one folder (:func:`staged_package`, for Ray's
``py_modules``). A run declared in the stack is submitted by the KubeRay operator, which has no files of its own,
so the same two packages go into the checkpoint bucket as one zip under ``_code/``,
named by the digest of their contents; every Ray pod sees the bucket at
``/data`` and puts the zip on ``PYTHONPATH`` (Python imports from zips).

Anything that can write the bucket (every job runs with its service account) could replace that
zip, so a declared run does not trust it: its entry point first runs :func:`verifier_command`, a
standard-library check that comes from the RayJob's own command, never from the archive, and
refuses to go on unless the archive's contents hash to the SHA-256 the RayJob names.
"""

from __future__ import annotations

import importlib.util
import inspect
import io
import shlex
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Iterable, Mapping

from gke_ray_tpu.core import user_cache
from gke_ray_tpu.core.job_spec import DATA_MOUNT, SHIPPED_PACKAGES

SUFFIXES = (".py", ".yml", ".toml")
"""Source, the presets, the TPU workers' lock (``core/worker_env/pylock.toml``, which the trainer reads)."""
ARCHIVE_DIR = "_code"
DIGEST_CHARS = 12
"""Hex digits of the content hash in the archive's name (the full hash is what a run checks)."""


def package_files(packages: Iterable[str] = SHIPPED_PACKAGES) -> dict[str, Path]:
    """``{path inside the zip: file}`` for every source file of the packages (no caches)."""
    files: dict[str, Path] = {}
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise LookupError(f"package {package} is not importable here")
        root = Path(next(iter(spec.submodule_search_locations)))
        prefix = package.replace(".", "/")
        for path in sorted(root.rglob("*")):
            if path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                files[f"{prefix}/{path.relative_to(root).as_posix()}"] = path
        # The packages above it (gke_ray_tpu/__init__.py), without which the archive's names do not import. Each
        # package's folder is its own (pyproject.toml maps them), so the parent is found by its name, not its path.
        parents = package.split(".")[:-1]
        for depth in range(1, len(parents) + 1):
            parent = ".".join(parents[:depth])
            files.setdefault(parent.replace(".", "/") + "/__init__.py", Path(importlib.util.find_spec(parent).origin))
    return files


def staged_package(files: Mapping[str, Path]) -> Path:
    """The archive's files as a folder, ``<user cache>/code/<digest>/gke_ray_tpu``: what Ray's ``py_modules`` uploads
    for a submitted run (it takes folders, not zips), so a submitted run ships what a declared run's archive holds.
    Written once per content; a later run of the same code reuses it."""
    root = user_cache("code") / digest(files)
    top = root / next(iter(files)).split("/")[0]
    if not top.is_dir():
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root.parent))
        for name, path in files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        try:
            staging.rename(root)
        except OSError:  # another submission of the same code wrote it first
            shutil.rmtree(staging, ignore_errors=True)
    return top


def contents_sha256(entries: Iterable[tuple[str, bytes]]) -> str:
    """SHA-256 over ``(name, contents)`` pairs in name order: of the files when the archive is built, of its
    members when a run verifies it. Standard library only, and self-contained: its source is the verifier's."""
    import hashlib

    hasher = hashlib.sha256()
    for name, data in sorted(entries):
        hasher.update(name.encode() + b"\0" + data + b"\0")
    return hasher.hexdigest()


def sha256(files: dict[str, Path]) -> str:
    """The archive's full content hash, which a declared run checks before importing it."""
    return contents_sha256((name, path.read_bytes()) for name, path in files.items())


def digest(files: dict[str, Path]) -> str:
    """The first hex digits of :func:`sha256`, naming the archive: the same code, the same archive."""
    return sha256(files)[:DIGEST_CHARS]


def verify_archive(path: str, expected: str) -> None:
    """Exit with a message unless the zip at ``path`` holds exactly the files whose hash is ``expected``.

    Every member counts, so an added module (a ``sitecustomize``, a second copy of a name, which
    zipimport would prefer) fails as surely as a changed one. Self-contained, like
    :func:`contents_sha256`: both are sent as source in the run's command."""
    import sys
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            actual = contents_sha256((i.filename, archive.read(i)) for i in archive.infolist() if not i.is_dir())
    except (OSError, zipfile.BadZipFile) as error:
        sys.exit(f"code archive {path}: cannot read it ({error}): refusing to run")
    if actual != expected:
        sys.exit(
            f"code archive {path}: its contents hash to {actual}, not to the run's {expected}: refusing to "
            "import it (was it replaced in the bucket?)"
        )


def archive_zip(files: Mapping[str, Path]) -> bytes:
    """The archive itself: the packages' files under their names (``gke_ray_tpu/core/...``, ``gke_ray_tpu/training/...``) at the root."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            archive.write(files[name], name)
    return buffer.getvalue()


def archive_object(code_digest: str) -> str:
    """The archive's object name in the bucket."""
    return f"{ARCHIVE_DIR}/gke-ray-tpu-{code_digest}.zip"


def archive_path(code_digest: str, mount: str = DATA_MOUNT) -> str:
    """Where every Ray pod sees the archive (the bucket is mounted at ``mount``)."""
    return f"{mount}/{archive_object(code_digest)}"


def verifier_command(path: str, expected: str) -> str:
    """A shell command that runs :func:`verify_archive` on ``path`` from its own source (``python -c``)."""
    source = "\n".join((
        "from __future__ import annotations",  # the functions' annotations name typing's Iterable
        inspect.getsource(contents_sha256),
        inspect.getsource(verify_archive),
        "import sys",
        "verify_archive(sys.argv[1], sys.argv[2])",
    ))
    # -I: neither PYTHONPATH (the archive itself) nor the working directory is on sys.path, so nothing of the
    # archive, not even a planted sitecustomize, runs before it is checked.
    return f"python -I -c {shlex.quote(source)} {shlex.quote(path)} {shlex.quote(expected)}"


def checked_job(command: str, code_sha256: str, mount: str = DATA_MOUNT) -> tuple[str, str]:
    """``(archive path, shell command)`` of a job that runs ``command`` from the archive named by ``code_sha256``,
    after :func:`verifier_command` has found the archive to be exactly that code (declared and submitted runs)."""
    archive = archive_path(code_sha256[:DIGEST_CHARS], mount)
    return archive, f"{verifier_command(archive, code_sha256)} && {command}"
