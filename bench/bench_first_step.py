"""Time to the first training step of the local run, phase by phase, cold and then with the compilation cache.

One local Ray head (its start is timed too), then the same tiny-preset job twice
with the same base_output_directory, so the second run finds the compiled
programs the first one cached (MaxText's jax_cache_dir). Each run is split at
the moments its log shows, from the submission (``submit_job``, which packages
and uploads ``core/`` and ``training/``):

* job up: the Ray Train controller's first "Started training worker group" line
  (the job's driver process started and imported Ray Train, workers were placed);
* workers ready: rank 0's first absl line (worker processes started, JAX's
  distributed runtime up);
* model ready: rank 0 found or restored its checkpoint (MaxText imported, config, mesh);
* compiled: MaxText's compiled-memory line (tracing, lowering, XLA or the cache);
* first step: rank 0's "completed step: 0".

Worker lines carry absl timestamps; the controller's do not, so "job up" is the
time that line arrived in the streamed log.

Then two bounds for the last run. Where the CPU went until its first step, per
process (Linux's /proc: the training workers, each of Ray's other processes, the
rest of the machine), and how many cores were busy on average. And the serial
floor: Ray starts the job's processes one after another (job supervisor -> job
driver -> Ray Train controller -> the workers), each a new process that imports
its code before it starts the next; each import is timed alone in a fresh
interpreter (best of 3) and added to what rank 0 spends after MaxText has its
model (compile from the cache, the first step). While Ray starts a new process for
each actor, no number of cores makes the first step come sooner than that sum.

    .venv/bin/python bench/bench_first_step.py [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gke_ray_tpu.core.job_spec import submission_id_for  # noqa: E402
from gke_ray_tpu.training.driver.jobs_client import JobsApi  # noqa: E402
from gke_ray_tpu.training.driver.local_ray import LocalRayHead  # noqa: E402
from gke_ray_tpu.training.driver.request import SubmitRequest  # noqa: E402
from gke_ray_tpu.training.driver.submission import LOCAL_WORKERS, for_local  # noqa: E402

_STAMP = re.compile(r"\(RayTrainWorker pid=(\d+)\)\S*\s+[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) ")
_RANK = re.compile(r"- \(ip=[^,)]+, pid=(\d+)\) world_rank=0")
MARKS = (
    ("model ready", ("No existing checkpoints found", "restoring from this run's directory step")),
    ("compiled", ("Total estimated memory size",)),
    ("first step", ("completed step: 0,",)),
)


def rank0_times(log: str) -> dict[str, float]:
    """Epoch seconds of rank 0's first line and of each mark."""
    rank0 = _RANK.search(log)
    year = time.localtime().tm_year
    found: dict[str, float] = {}
    for line in log.splitlines():
        stamp = _STAMP.search(line)
        if not (rank0 and stamp and stamp.group(1) == rank0.group(1)):
            continue
        when = datetime.strptime(f"{year}{stamp.group(2)}", "%Y%m%d %H:%M:%S.%f").timestamp()
        found.setdefault("workers ready", when)
        for name, texts in MARKS:
            if name not in found and any(text in line for text in texts):
                found[name] = when
    return found


SERIAL_CHAIN = (
    # (process, what it imports before it can start the next one)
    ("job supervisor", "ray.dashboard.modules.job.job_supervisor"),
    ("job driver (the trainer)", "gke_ray_tpu.training.worker.trainer, ray.train.v2.jax"),
    ("Ray Train controller", "ray.train.v2._internal.execution.controller.controller"),
    ("Ray Train worker, rank 0", "ray.train.v2._internal.execution.worker_group.worker"),
)
"""Each is a new process: Ray launches a worker process when the actor is asked for."""
MAXTEXT = "maxtext.trainers.pre_train.train"
TRAIN_WORKER = "ray::RayTrainWorker"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""/proc's CPU times are in these per second."""


def import_seconds(modules: str, after: str = "", tries: int = 3) -> float:
    """Best of ``tries``: seconds a fresh interpreter spends importing ``modules`` (after ``after``)."""
    code = (f"import time{', ' + after if after else ''}; t = time.perf_counter(); import {modules}; "
            "print(time.perf_counter() - t)")
    runs = []
    for _ in range(tries):
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
        runs.append(float(done.stdout.split()[-1]))
    return min(runs)


def machine_cpu_seconds() -> tuple[float, float]:
    """(CPU seconds spent on anything, seconds the hypervisor took), all cores together (/proc/stat)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS, steal / CLOCK_TICKS


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (the job's name for it, CPU seconds so far) for Ray's processes and the job driver."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if command.startswith("ray::"):
            name = command.split()[0].split(".")[0]
        elif "gke_ray_tpu.training.worker.trainer" in command:
            name = "job driver"
        else:
            continue
        found[int(entry.name)] = (name, (int(stat[11]) + int(stat[12])) / CLOCK_TICKS)
    return found


def one_run(client, out_dir: Path, run_name: str) -> dict:
    """One job, its log streamed the way the submit command streams it (polling the whole log
    every 0.1 s took the dashboard agent 1.4 CPU-s, not 0.4-0.7, out of a CPU-bound run)."""
    submission = for_local(SubmitRequest(local=True, output_dir=out_dir, overrides={"run_name": run_name}))
    sid = submission_id_for(run_name)
    processes_before, (cpu_before, stolen_before) = cpu_by_process(), machine_cpu_seconds()
    submitted = time.time()
    client.submit_job(entrypoint=submission.entrypoint, submission_id=sid, runtime_env=submission.runtime_env)
    seen: dict = {"packaged + uploaded": time.time()}
    parts: list[str] = []

    def on_text(text: str) -> None:
        recent = (parts[-1] if parts else "") + text
        parts.append(text)
        if "job up" not in seen and "Started training worker group" in recent:
            seen["job up"] = time.time()
        if "_cpu" not in seen and "completed step: 0," in recent:
            busy, stolen = machine_cpu_seconds()
            cpu = {"all": busy - cpu_before, "stolen": stolen - stolen_before, "wall": time.time() - submitted}
            for pid, (name, seconds) in cpu_by_process().items():
                cpu[name] = cpu.get(name, 0.0) + seconds - processes_before.get(pid, (name, 0.0))[1]
            seen["_cpu"] = cpu

    with JobsApi(client, log=print) as api:
        api.follow(sid, on_text)
        status = api.status(sid)
    log = "".join(parts)
    if status != "SUCCEEDED":
        raise SystemExit(f"{sid} {status}:\n{log[-3000:]}")
    return {**seen, **rank0_times(log), "_submitted": submitted}


def print_cpu(run: dict, label: str) -> None:
    """Where the CPU went from submission to the first step."""
    cpu = dict(run["_cpu"])
    everything, stolen, wall = cpu.pop("all"), cpu.pop("stolen"), cpu.pop("wall")
    workers = cpu.pop(TRAIN_WORKER, 0.0)
    ray_side = sorted(((seconds, name) for name, seconds in cpu.items() if seconds >= 0.05), reverse=True)
    print(f"CPU from submission to the first step, {label}: {everything:.1f} CPU-s in {wall:.1f} s "
          f"({everything / wall:.2f} of {os.cpu_count()} cores busy; "
          f"the hypervisor took another {stolen / wall:.2f})")
    print(f"  {f'training workers ({LOCAL_WORKERS})':<34}{workers:>6.1f} CPU-s")
    for seconds, name in ray_side:
        print(f"  {name.removeprefix('ray::'):<34}{seconds:>6.1f} CPU-s")
    print(f"  {'everything else':<34}{everything - workers - sum(s for s, _ in ray_side):>6.1f} CPU-s")


def print_serial_floor(run: dict, label: str) -> None:
    """The part no number of cores shortens: each process of the chain is started by the one before."""
    print("serial floor: the job's processes in the order Ray starts them, each import timed alone (best of 3)")
    floor = 0.0
    for process, modules in SERIAL_CHAIN:
        seconds = import_seconds(modules)
        floor += seconds
        print(f"  {process:<34}{seconds:>6.1f} s  import {modules}")
    maxtext = import_seconds(MAXTEXT, after=SERIAL_CHAIN[-1][1])
    after_model = run["first step"] - run["model ready"]
    floor += maxtext + after_model
    print(f"  {'  then MaxText':<34}{maxtext:>6.1f} s  import {MAXTEXT}")
    print(f"  {'  then compile + step 0':<34}{after_model:>6.1f} s  rank 0, {label}, from the cache")
    measured = run["first step"] - run["_submitted"]
    print(f"  {'sum':<34}{floor:>6.1f} s  vs {measured:.1f} s measured, {label} (ratio {measured / floor:.2f})")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2, help="runs of the same shape (the first is cold)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-first-step-") as tmp:
        out = Path(tmp)
        started = time.monotonic()
        with LocalRayHead(num_cpus=2, log_path=out / "ray-head.log") as head:
            head_s = time.monotonic() - started
            client = head.jobs()
            runs = [one_run(client, out, f"bench-first-{n}") for n in range(args.runs)]
    print(f"local Ray head start: {head_s:.1f} s (once per `--local` command)")
    names = ["packaged + uploaded", "job up", "workers ready", "model ready", "compiled", "first step"]
    print(f"{'seconds since submission':<26}" + "".join(f"{'run ' + str(n + 1):>10}" for n in range(len(runs))))
    for name in names:
        cells = "".join(f"{run[name] - run['_submitted']:>10.1f}" for run in runs)
        print(f"  {name:<24}{cells}")
    first, last = runs[0], runs[-1]
    compile_first = first["compiled"] - first["model ready"]
    compile_last = last["compiled"] - last["model ready"]
    print(f"trace + compile: {compile_first:.2f} s cold, {compile_last:.2f} s cached "
          f"(ratio {compile_last / compile_first:.3f})")
    first_s = first["first step"] - first["_submitted"]
    last_s = last["first step"] - last["_submitted"]
    print(f"first step: {first_s:.1f} s cold, {last_s:.1f} s on run {len(runs)} (ratio {last_s / first_s:.2f})")
    print_cpu(last, f"run {len(runs)}")
    print_serial_floor(last, f"run {len(runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
