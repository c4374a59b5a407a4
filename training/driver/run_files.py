"""A run's files on this machine, under ``<output dir>/<run_name>/``.

``job.log`` is the whole log of the run's latest job (the Jobs API replays a
job's log from its start to every command that follows it, so each command
writes it whole; the log of an earlier attempt is kept as
``<submission id>.log``). ``job.json`` is that job's record: Ray's submission
and end times (Ray forgets them with the cluster), its status, where MaxText
writes the run's event files, and the price of the chips it held, which
``gke_ray_tpu.training.report`` needs for the goodput accounting. ``report.png`` is the figure.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

JOB_LOG = "job.log"
JOB_RECORD = "job.json"
FIGURE = "report.png"


@dataclass(frozen=True)
class JobRecord:
    submission_id: str
    submitted_at: float
    """Epoch seconds: Ray's ``start_time`` of the job, set when it was submitted."""
    ended_at: Optional[float]
    """Epoch seconds: Ray's ``end_time`` (None while it runs)."""
    status: str
    metrics_dir: str
    """Where MaxText writes the run's event files, as this machine reaches them (``gs://`` for a cluster run)."""
    chips: int
    """TPU chips billed while the job ran (0 for a local run)."""
    usd_per_chip_hour: Optional[float]
    """List price per chip-hour (0 for a local run; None when there is none for these chips here)."""
    price_note: str = ""
    """Where the price comes from, or why there is none."""

    @property
    def usd_per_hour(self) -> Optional[float]:
        return None if self.usd_per_chip_hour is None else self.chips * self.usd_per_chip_hour

    def save(self, run_dir: Path) -> Path:
        path = run_dir / JOB_RECORD
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, run_dir: Path) -> "JobRecord":
        """The record in ``run_dir``; FileNotFoundError if this machine never followed the run's job."""
        return cls(**json.loads((run_dir / JOB_RECORD).read_text()))


def open_job_log(run_dir: Path, submission_id: str):
    """``job.log`` for writing ``submission_id``'s log; an earlier job's log is kept under its own id."""
    path = run_dir / JOB_LOG
    try:
        previous = JobRecord.load(run_dir).submission_id
    except FileNotFoundError:
        previous = None
    if path.exists() and previous not in (None, submission_id):
        path.rename(run_dir / f"{previous}.log")
    return open(path, "w", encoding="utf-8")
