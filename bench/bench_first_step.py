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
time the bench first saw that line in the log (polled every 0.1 s).

    .venv/bin/python bench/bench_first_step.py [--runs 2]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.job_spec import submission_id_for  # noqa: E402
from training.driver.local_ray import LocalRayHead  # noqa: E402
from training.driver.request import SubmitRequest  # noqa: E402
from training.driver.submission import for_local  # noqa: E402

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


def one_run(client, out_dir: Path, run_name: str) -> dict[str, float]:
    submission = for_local(SubmitRequest(local=True, output_dir=out_dir, overrides={"run_name": run_name}))
    sid = submission_id_for(run_name)
    submitted = time.time()
    client.submit_job(entrypoint=submission.entrypoint, submission_id=sid, runtime_env=submission.runtime_env)
    uploaded = time.time()
    job_up = None
    while True:
        log = client.get_job_logs(sid)
        if job_up is None and "Started training worker group" in log:
            job_up = time.time()
        status = str(client.get_job_status(sid).value)
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        time.sleep(0.1)
    if status != "SUCCEEDED":
        raise SystemExit(f"{sid} {status}:\n{log[-3000:]}")
    marks = rank0_times(log)
    return {"packaged + uploaded": uploaded, "job up": job_up, **marks, "_submitted": submitted}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2, help="runs of the same shape (the first is cold)")
    args = parser.parse_args()
    from ray.job_submission import JobSubmissionClient

    with tempfile.TemporaryDirectory(prefix="bench-first-step-") as tmp:
        out = Path(tmp)
        started = time.monotonic()
        with LocalRayHead(num_cpus=2, log_path=out / "ray-head.log") as head:
            head_s = time.monotonic() - started
            client = JobSubmissionClient(head.address)
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
    print(f"first step: {first['first step'] - first['_submitted']:.1f} s cold, "
          f"{last['first step'] - last['_submitted']:.1f} s on run {len(runs)} "
          f"(ratio {(last['first step'] - last['_submitted']) / (first['first step'] - first['_submitted']):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
