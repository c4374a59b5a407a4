"""Does the workers' lock reproduce from its command? ``bin/lock-worker-env`` run twice, side by side with the lock.

Runs the script as the lock's header records it (PyPI at the moment it names), once with an empty uv cache and once
with the cache the first run left, each into a directory of its own, and compares the two files and the committed
lock byte for byte. Beside them, the same resolution without ``--exclude-newer`` (the script before the moment was
pinned): how many locked packages PyPI moves today.

    .venv/bin/python bench/bench_lock_reproduce.py

Needs PyPI; under a minute.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bin" / "lock-worker-env"
LOCK = REPO / "core" / "worker_env" / "pylock.toml"


def lock_once(directory: Path, cache: Path) -> tuple[float, Path]:
    """Seconds the script took, and the lock it wrote."""
    directory.mkdir()
    started = time.monotonic()
    subprocess.run([str(SCRIPT), "--output", str(directory)], check=True, env={**os.environ, "UV_CACHE_DIR": str(cache)})
    return time.monotonic() - started, directory / "pylock.toml"


def unpinned(directory: Path, cache: Path) -> Path:
    """The script's uv command without the moment: PyPI as it is now."""
    directory.mkdir()
    command = shlex.split(subprocess.run([str(SCRIPT), "--print"], capture_output=True, text=True, check=True).stdout)
    for flag in ("--exclude-newer", "--custom-compile-command"):
        del command[command.index(flag):command.index(flag) + 2]
    constraints = directory / "constraints.txt"
    constraints.write_text("".join(line for line in (REPO / "requirements.txt").read_text().splitlines(True)
                                   if not line.startswith("sympy==")))
    command[command.index("requirements.txt-without-sympy")] = str(constraints)
    command[command.index("--output-file") + 1] = str(directory / "pylock.toml")
    subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "uv", *command[1:]], check=True, cwd=REPO,
                   env={**os.environ, "UV_CACHE_DIR": str(cache)})
    return directory / "pylock.toml"


def versions(path: Path) -> dict[str, str]:
    return {p["name"]: p["version"] for p in tomllib.loads(path.read_text())["packages"]}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="lock-reproduce-") as scratch:
        root = Path(scratch)
        cold_s, first = lock_once(root / "first", root / "uv-cache")
        warm_s, second = lock_once(root / "second", root / "uv-cache")
        today = unpinned(root / "today", root / "uv-cache")
        locked, moved = versions(LOCK), versions(today)
        differ = sorted(name for name in locked if moved.get(name) != locked[name])
        print(f"lock header: {LOCK.read_text().splitlines()[1].strip('# ')}")
        print(f"{'':34s} {'seconds':>8s} {'sha256':>17s}  same bytes as the lock")
        print(f"{'committed lock':34s} {'':>8s} {digest(LOCK):>17s}")
        print(f"{'run 1 (empty uv cache)':34s} {cold_s:8.1f} {digest(first):>17s}  {first.read_bytes() == LOCK.read_bytes()}")
        print(f"{'run 2 (the cache run 1 left)':34s} {warm_s:8.1f} {digest(second):>17s}  {second.read_bytes() == LOCK.read_bytes()}")
        print(f"run 1 and run 2 byte-identical: {first.read_bytes() == second.read_bytes()}")
        print(f"without --exclude-newer (PyPI now): {len(differ)} of {len(locked)} locked packages at other versions"
              + (f": {', '.join(f'{n} {locked[n]} -> {moved.get(n)}' for n in differ)}" if differ else ""))
        return 0 if first.read_bytes() == second.read_bytes() == LOCK.read_bytes() else 1


if __name__ == "__main__":
    sys.exit(main())
