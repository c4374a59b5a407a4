"""The TPU workers' Python environment: one lock, the script that installs it, the Dockerfile that bakes it.

``pylock.toml`` (PEP 751, written by ``bin/lock-worker-env`` from ``requirements.in``) pins every
package the TPU workers import, for Python 3.12 on manylinux x86_64, wheels only, each wheel with its
size and sha256 from PyPI. Its jax, jaxlib, libtpu, maxtext, orbax-checkpoint and ray are
requirements.txt's, so the compile check and the local run use what the pods run
(tests/test_worker_env.py). ``install.py`` installs it; the ``Dockerfile`` runs ``install.py`` on Ray's
image (:mod:`gke_ray_tpu.components.worker_image` builds it); without that image the TPU workers'
runtime env installs what the image lacks (:func:`missing`, in ``gke_ray_tpu.training.worker.trainer``).
This directory is the image's build context.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from typing import Iterable, Mapping

from gke_ray_tpu.core.worker_env.install import installed_here, missing, normalized, parse_lock, requirement_line

__all__ = [
    "CONTEXT_DIR", "DOCKERFILE", "LOCK_FILE", "KEY_PACKAGES", "COMPILER_PACKAGES", "UV_VERSION",
    "packages", "locked_versions", "lock_digest", "wheel_bytes", "installed_here", "missing", "normalized",
    "requirement_line",
]

CONTEXT_DIR = resources.files(__name__)
"""This directory: a ``pathlib.Path`` where the package is a directory (the image's build context), a zip's path
inside a declared run's code archive, where the trainer reads the lock."""
LOCK_FILE = CONTEXT_DIR / "pylock.toml"
DOCKERFILE = CONTEXT_DIR / "Dockerfile"

KEY_PACKAGES = ("jax", "jaxlib", "libtpu", "maxtext", "orbax-checkpoint", "ray")
"""What the lock, requirements.txt and the project's environment must agree on."""
COMPILER_PACKAGES = ("maxtext", "libtpu", "jax", "jaxlib")
"""What decides the program XLA compiles (the compile check's verdict names their versions)."""

UV_VERSION = "0.13.8"
"""The uv that wrote the lock (requirements-dev.txt) and that Ray's runtime env installs on a TPU worker
without the stack's image (``uv_version``): an unpinned one would be whatever PyPI has that day."""


@functools.cache
def packages() -> tuple[dict, ...]:
    """The lock's packages, each ``{name, version, wheels: [{url, size, hashes}]}``."""
    return tuple(parse_lock(LOCK_FILE.read_text()))


def locked_versions(names: Iterable[str] = ()) -> dict[str, str]:
    """{normalized name: locked version} of ``names`` (all when empty); a name the lock lacks is a KeyError."""
    every = {normalized(p["name"]): p["version"] for p in packages()}
    wanted = [normalized(name) for name in names]
    return {name: every[name] for name in wanted} if wanted else every


def lock_digest() -> str:
    """sha256 of the lock file: what the image's tag names, so a new lock is a new tag."""
    return hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()


def _download(package: Mapping) -> int:
    """Bytes pip downloads for a package on manylinux x86_64: its platform wheel where it has one (pip prefers
    it), else its pure-Python one."""
    wheels = package["wheels"]
    platform = [w for w in wheels if not w["url"].endswith("-any.whl")]
    return (platform or wheels)[0]["size"]


def wheel_bytes(selected: Iterable[Mapping] | None = None) -> int:
    """The wheels' bytes of ``selected`` packages of the lock (all when None), from PyPI's metadata in the lock."""
    return sum(_download(p) for p in (packages() if selected is None else selected))
