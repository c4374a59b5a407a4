"""What a TPU host pays at start without the stack's image: the workers' lock installed from an empty cache.

Creates a fresh Python 3.12 virtual environment (what Ray's runtime env makes on a worker; here without
Ray's image under it, so every package of the lock is installed, the most a host can have to install) and
runs ``gke_ray_tpu/core/worker_env/install.py`` on the lock, the image's own build step, with pip's cache
off. Prints the seconds, the bytes pip downloaded (the wheels' sizes in the lock) and what the environment
takes on disk, beside the stack's image, where a TPU host installs nothing at start.

``--checks`` then runs, in that environment, what issue 33 asks to be shown: the local run of the trainer
(the tiny preset, ``python -m gke_ray_tpu.training.submit --local`` on the environment's Python) and the
compile check's child for the tutorial's 8B on the dev stack's slices under the pods' flags, beside the
compile check's verdict in the project's own environment.

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


def compile_8b(python: Path) -> tuple[dict, dict]:
    """XLA's verdict for the dev stack's 8B run on the lock's Python, and the project environment's (cached, or
    compiled now by the compile check itself)."""
    from gke_ray_tpu.stack import wiring, xla_check
    from gke_ray_tpu.stack.config import parse_stack_config
    from gke_ray_tpu.stack.mock_engine import load_stack_file
    from gke_ray_tpu.stack.preflight import planned_job

    cfg = parse_stack_config(load_stack_file(REPO / "Pulumi.dev.yaml"))
    request = xla_check.request_for_job(planned_job(cfg, "llama3-8b", {}), xla_check.pod_flags(wiring.planned_cluster_spec(cfg)))
    project = xla_check.compile_check(request).outcome
    with tempfile.TemporaryDirectory() as scratch:
        ask, answer = Path(scratch, "request.json"), Path(scratch, "result.json")
        ask.write_text(json.dumps({"maxtext_argv": list(request.maxtext_argv),
                                   "compile_topology": request.compile_topology, "num_slices": request.num_slices}))
        env = {**xla_check._child_env(request)}
        subprocess.run([str(python), "-m", "gke_ray_tpu.stack.xla_compile", str(ask), str(answer)], cwd=REPO, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=xla_check.TIMEOUT_S)
        return json.loads(answer.read_text()), project


def verdict(outcome: dict) -> str:
    if outcome["status"] == "compiled":
        return f"compiled, peak {outcome['peak_bytes'] / 2**30:.2f} GiB of {outcome['hbm_limit_gib']:.2f} GiB"
    return f"{outcome['status']}: {outcome.get('message', '')[:200]}"


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
        print("compile check, llama3-8b on 2 x v6e-16, the lock's Python:      ", verdict(lock))
        print("compile check, llama3-8b on 2 x v6e-16, the project's:          ", verdict(project))
    if not args.keep:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
