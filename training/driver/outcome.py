"""How a run ended, as the submit command tells it: the last lines, the goodput report and the exit status.

Whatever the run ran on (the stack's RayCluster, its own cluster, a local head),
its end is a :class:`Followed` and :func:`outcome` says it; the record the
goodput accounting reads is :func:`job_record`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gke_ray_tpu.core.exit_status import NO, OK
from gke_ray_tpu.core.job_spec import JobSpec, run_location
from gke_ray_tpu.training.driver.jobs_client import Next
from gke_ray_tpu.training.driver.progress import ERROR_LINES, Progress
from gke_ray_tpu.training.driver.run_files import FIGURE, JOB_LOG, JobRecord


@dataclass(frozen=True)
class Followed:
    """Where following a job left it."""

    status: str
    message: str
    """Why it failed, when its log says nothing (Ray's message, or KubeRay's reason)."""
    record: JobRecord


def summary(progress: Progress) -> str:
    """``16 steps, loss 6.061 -> 3.370, 1 restart (restored checkpoint 4)``."""
    first, last = progress.first, progress.last
    text = f"{len(progress.steps)} steps"
    if first and last:
        text += f", loss {first.loss:.3f} -> {last.loss:.3f}"
    restarts = len(progress.groups) - 1
    restored = [str(g.restored_step) for g in progress.groups if g.restored_step is not None]
    if restarts > 0:
        text += f", {restarts} restart{'s' * (restarts > 1)}"
    if restored:
        text += f" (restored checkpoint {', '.join(restored)})"
    return text


def job_record(timing, sid: str, spec: JobSpec, outputs) -> JobRecord:
    """What the goodput accounting needs to know of the job once Ray's record of it is gone.

    ``timing``: what has the job's times (a ``JobsApi``, or a ``RayJobTiming`` once its cluster is gone)."""
    status, submitted, ended = timing.timing(sid)
    metrics_at = run_location(spec, "tensorboard", outputs.bucket_name if outputs else None)
    if outputs is None:
        return JobRecord(sid, submitted, ended, status, metrics_at, chips=0, usd_per_chip_hour=0.0,
                         price_note="a local run: no TPU")
    # A stack that scales to zero holds the run's slices only; otherwise every slice is paid for.
    slices = spec.slices if outputs.scale_to_zero else outputs.num_slices
    rate, note = outputs.chip_rate
    return JobRecord(sid, submitted, ended, status, metrics_at, slices * outputs.chips_per_slice, rate, note)


def report(run_dir: Path, record: JobRecord, title: str, log: Callable[[str], None]) -> None:
    """The run's goodput line and figure, from what the run wrote, when they can be read."""
    from gke_ray_tpu.training import report as goodput_report

    built = goodput_report.write_report(run_dir, record.metrics_dir, run_dir / FIGURE, title=title)
    log(built.goodput.line() if built.goodput else built.no_goodput)
    log(f"figure: {built.figure}" if built.figure else f"no figure: {built.no_figure}")


def outcome(nxt: Next, run_name: str, followed: Followed, progress: Progress, run_dir: Path, checkpoints: str,
            started: float, log: Callable[[str], None], resubmit: bool) -> int:
    """The run's last lines (outcome, goodput, figure, error lines) and the exit status."""
    sid, status = nxt.submission_id, followed.status
    if nxt.action == "report":
        log(f"{sid} {status}: {summary(progress)}; checkpoints: {checkpoints}")
        report(run_dir, followed.record, run_name, log)
        return OK if status == "SUCCEEDED" else NO
    log(f"{sid} {status} after {time.monotonic() - started:.0f} s: {summary(progress)}; checkpoints: {checkpoints}")
    report(run_dir, followed.record, run_name, log)
    if status == "SUCCEEDED":
        return OK
    if status == "FAILED":
        lines = list(progress.errors) or [line for line in followed.message.splitlines() if line.strip()][-ERROR_LINES:]
        log(f"{sid} FAILED; its last error lines:")
        for line in lines or [f"(none in the job's log; see {run_dir / JOB_LOG})"]:
            log(f"    {line}")
    elif status == "STOPPED":
        log(f"{sid} was STOPPED (Ctrl-C, `ray job stop` or the dashboard)")
    else:
        log(f"{sid} is still {status} though its log ended; run the same command again to follow it")
        return NO
    if resubmit:
        log(f"run the same command again to resume run {run_name} from its latest checkpoint as a new attempt")
    return NO
