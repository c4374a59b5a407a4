"""Install the TPU workers' lock into the Python that runs this file: ``python install.py pylock.toml``.

The image's build step (``Dockerfile`` beside this file) and tests/test_worker_env.py run this same file,
so what the image installs is what the test installs. Standard library only: it runs in the base image
before anything of this project is there.

pip installs each locked package at its locked version from a wheel whose sha256 the lock names
(``--require-hashes``), and nothing else (``--no-deps``: the lock is complete); a package the Python
already has at that version is left as it is, so on Ray's image the packages Ray brought at the same
versions are not downloaded again. pip is used, not uv, because uv does not see the packages of the
Python it installs into when that is a virtual environment over the image's (astral-sh/uv#7358), and
the image has pip.

Then ``pip check``: on Ray's image the lock replaces packages Ray's image brought at other versions (urllib3,
protobuf, the ones conda installed), and a package the lock does not hold that requires the old version would
break at import on the slices; the build fails here instead, with pip's line naming both.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Iterable, Mapping

PIP_OPTIONS = ("--no-deps", "--require-hashes", "--only-binary=:all:", "--no-cache-dir", "--disable-pip-version-check")


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Orbax_Checkpoint`` is ``orbax-checkpoint``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> list[dict]:
    """The ``[[packages]]`` of a PEP 751 lock, each with its name, version and wheels (url, size, hashes)."""
    return tomllib.loads(text)["packages"]


def read_lock(path: Path | str) -> list[dict]:
    return parse_lock(Path(path).read_text())


def requirement_line(package: Mapping) -> str:
    """One requirements-file line that admits only the package's locked wheels: ``name==version --hash=...``."""
    hashes = " ".join(f"--hash=sha256:{wheel['hashes']['sha256']}" for wheel in package["wheels"])
    return f"{package['name']}=={package['version']} {hashes}"


def missing(packages: Iterable[Mapping], installed: Mapping[str, str]) -> list[dict]:
    """The locked packages that ``installed`` ({normalized name: version}) lacks at their locked version."""
    return [dict(p) for p in packages if installed.get(normalized(p["name"])) != p["version"]]


def installed_here() -> dict[str, str]:
    """{normalized name: version} of every distribution this Python imports from."""
    from importlib import metadata

    return {normalized(dist.metadata["Name"]): dist.version for dist in metadata.distributions()}


def install(lock: Path, python: str = sys.executable) -> int:
    """pip's exit status of installing ``lock`` into ``python``, then of ``pip check`` of the whole environment."""
    with tempfile.TemporaryDirectory(prefix="worker-env-") as scratch:
        requirements = Path(scratch, "requirements.txt")
        requirements.write_text("".join(requirement_line(p) + "\n" for p in read_lock(lock)))
        status = subprocess.run([python, "-m", "pip", "install", *PIP_OPTIONS, "-r", str(requirements)]).returncode
    if status:
        return status
    return subprocess.run([python, "-m", "pip", "check", "--disable-pip-version-check"]).returncode


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.executable} {sys.argv[0]} pylock.toml")
    sys.exit(install(Path(sys.argv[1])))
