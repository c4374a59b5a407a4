"""The goodput of the local run and of the kill drill, each bucket beside the record it can be checked against.

Runs, on one local Ray head whose workers log JAX's own compile times
(``JAX_LOG_COMPILES=1``): the local job (``python -m gke_ray_tpu.training.submit --local``)
twice in one output directory, so the second finds the first's compilation cache,
then the kill drill of ``tests/drill.py`` (16 steps, checkpoint period 4, rank 0
SIGKILLed). For each it prints the buckets ``gke_ray_tpu.training.report`` lays the wall time
into, and beside them what the accounting does not read: MaxText's per-step
seconds in its event files (productive), JAX's compile timings from the checkpoint
lookup to the train step's XLA compilation (compilation), the drill's own clock
from the kill to the next step (recovery), and the steps both worker groups wrote
to their event files (lost progress). Also what docs/training.md quotes of the
local run: wall time, loss, the submit command's lines against the job log's, and
the job log's size (without JAX's compile lines, which only this bench turns on).

    .venv/bin/python bench/bench_goodput.py [--only local|drill]

The figures vary with the machine's load far more than with the code: start-up
is mostly processes importing Ray, JAX and MaxText on 2 shared cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.drill import jax_compile_seconds, kept_step_seconds, kill_a_worker, maxtext_step_seconds  # noqa: E402
from gke_ray_tpu.training import report  # noqa: E402
from gke_ray_tpu.training.driver.local_ray import LocalRayHead  # noqa: E402
from gke_ray_tpu.training.driver.progress import Progress  # noqa: E402
from gke_ray_tpu.training.goodput import BUCKETS, LABELS  # noqa: E402

JAX_LINE = "dispatch.py:"
"""Where JAX's compile-time lines come from (absl's file:line)."""


def goodput(run_dir: Path):
    built = report.write_report(run_dir, str(run_dir / "tensorboard"), run_dir / report.FIGURE, run_dir.name)
    if built.goodput is None:
        raise SystemExit(f"no goodput for {run_dir}: {built.no_goodput}")
    return built.goodput


def rank0(log: str, group: int = 0) -> int:
    progress = Progress()
    progress.feed(log)
    progress.flush()
    return {rank: pid for pid, rank in progress.groups[group].ranks.items()}[0]


def show(title: str, result, checks: list[tuple[str, str]]) -> None:
    print(f"\n{title}: wall {result.wall_s:.1f} s, goodput {result.goodput_pct:.1f}%, "
          f"{result.restarts} restart(s), {result.rerun_steps} step(s) run again")
    for name in BUCKETS:
        print(f"  {LABELS[name]:<34}{result.buckets[name]:>8.1f} s")
    for label, value in checks:
        print(f"  check: {label:<45}{value}")


def local_run(head: LocalRayHead, out: Path, name: str) -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gke_ray_tpu.training.submit", "--local", "--address", head.address,
                           "--output-dir", str(out), f"run_name={name}"],
                          cwd=REPO, capture_output=True, text=True, timeout=900, env={**os.environ, **head.address_env})
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    run_dir = out / name
    log = (run_dir / "job.log").read_text()
    result = goodput(run_dir)
    [recorded] = maxtext_step_seconds(run_dir / "tensorboard")
    jax_s, train_step_s = jax_compile_seconds(log, rank0(log))
    losses = report.read_metrics(str(run_dir / "tensorboard")).series(report.LOSS)
    without_jax = sum(len(line.encode()) + 1 for line in log.splitlines() if JAX_LINE not in line)
    show(f"local run {name}", result, [
        ("MaxText's step seconds (event files), sum", f"{sum(recorded.values()):.2f} s"),
        ("JAX's compile timings, sum (train step XLA)", f"{jax_s:.2f} s ({train_step_s:.2f} s)"),
    ])
    print(f"  the submit command: {wall:.1f} s wall, loss {losses[0][1]:.2f} -> {losses[-1][1]:.2f}, "
          f"{len(done.stderr.splitlines())} lines printed; the job log {len(log.splitlines())} lines, "
          f"{without_jax / 1e6:.2f} MB without JAX's compile lines")


def drill(head: LocalRayHead, out: Path) -> None:
    # A long bound: on a machine other jobs load, the drill's default 480 s is not enough.
    d = kill_a_worker(head, out, "bench-goodput-drill", steps=16, checkpoint_period=4, rank=0, timeout_s=1800)
    if d.status != "SUCCEEDED":
        raise SystemExit(f"drill {d.status}:\n{d.stderr[-3000:]}")
    result = goodput(d.run_dir)
    killed, resumed = maxtext_step_seconds(d.run_dir / "tensorboard")
    twice = sorted(set(killed) & set(resumed))
    restored = d.resumed_group.restored_step
    kept_s = kept_step_seconds([killed, resumed], [restored])
    jax_s, train_step_s = jax_compile_seconds(d.log, rank0(d.log))
    without_jax = sum(len(line.encode()) + 1 for line in d.log.splitlines() if JAX_LINE not in line)
    show("kill drill (16 steps, rank 0 killed)", result, [
        ("MaxText's step seconds, the kept steps, sum", f"{kept_s:.2f} s (restored step {restored})"),
        ("kill -> next step (the drill's clock)", f"{d.recovery()['next_step_s']:.1f} s"),
        ("steps in both groups' event files", f"{twice} (killed after step {d.last_step_seen})"),
        ("JAX's compile timings, sum (train step XLA)", f"{jax_s:.2f} s ({train_step_s:.2f} s)"),
    ])
    print(f"  the job log: {without_jax / 1e6:.2f} MB without JAX's compile lines")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=("local", "drill"), help="run only the local runs, or only the drill")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="bench-goodput-") as tmp:
        out = Path(tmp)
        with LocalRayHead(num_cpus=2, log_path=out / "ray-head.log", env={"JAX_LOG_COMPILES": "1"}) as head:
            if args.only != "drill":
                local_run(head, out, "bench-goodput-cold")
                local_run(head, out, "bench-goodput-warm")
            if args.only != "local":
                drill(head, out)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
