"""What a TPU host pays at start without the stack's image: the workers' lock installed from an empty cache.

Creates a fresh Python 3.12 virtual environment (what Ray's runtime env makes on a worker; here without
Ray's image under it, so every package of the lock is installed, the most a host can have to install) and
runs ``core/worker_env/install.py`` on the lock, the image's own build step, with pip's cache
off. Prints the seconds, the bytes pip downloaded (the wheels' sizes in the lock) and what the environment
takes on disk, beside the stack's image, where a TPU host installs nothing at start.

``--checks`` then runs, in that environment, what issue 33 asks to be shown: the local run of the trainer
(the tiny preset, ``python -m gke_ray_tpu.training.submit --local`` on the environment's Python) and the
compile check for the tutorial's 8B on the dev stack's slices (each compile it makes, on that environment's
Python), beside the compile check's verdict in the project's own environment.

    .venv/bin/python bench/bench_lock_install.py [--keep DIR [--installed]] [--checks]

Needs PyPI and about 4 GB of disk; minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gke_ray_tpu.core import worker_env  # noqa: E402

GB = 1e9


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def install(venv: Path) -> dict:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    empty = disk_bytes(venv)
    env = {**os.environ, "PIP_CACHE_DIR": str(venv.parent / "empty-pip-cache")}
    started = time.monotonic()
    subprocess.run([str(venv / "bin" / "python"), str(worker_env.CONTEXT_DIR / "install.py"), str(worker_env.LOCK_FILE)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return {"seconds": time.monotonic() - started, "downloaded": worker_env.wheel_bytes(),
            "installed": disk_bytes(venv) - empty, "packages": len(worker_env.packages())}


def local_run(python: Path) -> str:
    """The local run on the lock's Python: its last lines."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([str(python), "-m", "gke_ray_tpu.training.submit", "--local"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=1800)
    tail = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()][-4:]
    return f"exit {result.returncode}: " + " | ".join(tail)


def compile_8b(python: Path) -> tuple[str, str]:
    """The compile check's verdict on the dev stack's 8B run as it compiles it (every compile it makes), its
    children on the lock's Python with a cache of their own, beside the project environment's (cached, or
    compiled now)."""
    from unittest import mock

    from gke_ray_tpu.preflight import xla_check
    from gke_ray_tpu.stack.plan import plan_stack
    from gke_ray_tpu.stack.parse import parse_stack_config
    from gke_ray_tpu.stack.mock_engine import load_stack_file
    from gke_ray_tpu.stack.checks import planned_job

    cfg = parse_stack_config(load_stack_file(REPO / "Pulumi.dev.yaml"))
    job = planned_job(cfg, "llama3-8b", {})
    flags = plan_stack(cfg).pod_flags
    project = xla_check.check_job(job, flags, [cfg.num_slices])
    with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, {xla_check.CACHE_DIR_ENV: cache}), \
            mock.patch.object(sys, "executable", str(python)):
        lock = xla_check.check_job(job, flags, [cfg.num_slices])
    return verdicts(lock), verdicts(project)


def verdicts(results) -> str:
    """Each compile's verdict, peak and seconds: the run's, and the small model's under the pods' flags."""
    lines = []
    for count, result in sorted(results.by_slices.items()):
        for what, one in (("the run", result), ("the flags' small model", result.flags_check)):
            if one is None:
                continue
            peak = f", peak {one.peak_hbm_gib:.2f} GiB of {one.hbm_limit_gib:.2f}" if one.peak_hbm_gib else ""
            lines.append(f"{count} slice(s), {what}: {one.status}{peak} ({one.wall_seconds:.0f} s"
                         f"{', cached' if one.cached else ''})")
    return "; ".join(lines)


def report(figures: dict) -> None:
    rate = figures["downloaded"] / figures["seconds"]
    print(f"the lock ({figures['packages']} wheels) from an empty cache into a fresh Python 3.12: "
          f"{figures['seconds']:.0f} s, {figures['downloaded'] / GB:.2f} GB downloaded "
          f"({rate / 1e6:.1f} MB/s of wheels, install included), {figures['installed'] / GB:.2f} GB installed")
    print("the stack's image (the lock installed at build): 0 s, 0 bytes installed on a TPU host at start; "
          f"ratio install/image: {figures['seconds']:.0f} s : 0 s per host and run start "
          "(the image's bytes are pulled instead: see the preview's cold-start lines)")
    print(json.dumps({key: round(value, 1) for key, value in figures.items()}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="install into DIR/venv and keep it (default: a temporary directory)")
    parser.add_argument("--checks", action="store_true", help="then run the local run and the 8B compile in it")
    parser.add_argument("--installed", action="store_true", help="with --keep: DIR/venv has the lock already, run only the checks")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench-lock-"))
    venv = root / "venv"
    if not args.installed:
        shutil.rmtree(venv, ignore_errors=True)
        report(install(venv))
    if args.checks:
        python = venv / "bin" / "python"
        print("local run on the lock's Python:", local_run(python))
        lock, project = compile_8b(python)
        print("compile check, llama3-8b on 2 x v6e-16, the lock's Python:", lock)
        print("compile check, llama3-8b on 2 x v6e-16, the project's:    ", project)
    if not args.keep:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
