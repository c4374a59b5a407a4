"""A job's timeline for the goodput accounting, read from what the run already writes.

The workers log through absl, whose lines carry the time to the microsecond but
no year and no time zone (``I1203 18:05:57.558379 ...``); MaxText's event files
carry true wall times. The zone is read off the two: the last step rank 0 logged
is also in the event files, and the difference is rounded to the quarter hour
(time zones are whole quarters). Without events, the times are taken as this
machine's local time, as they are for a local run. Ray's job record gives the
submission and the end.

What is read, per start of the worker group (``gke_ray_tpu.training.driver.progress`` tells
the groups and their workers apart by pid), from its rank 0 unless said:

- the first and last line of any of its workers;
- MaxText's step lines (``completed step: N, seconds: S, ...``);
- ``Waiting for step N to finish before checkpoint``: MaxText logs it as soon as
  step N is dispatched, which ties the steps' seconds to the clock;
- the checkpoint lookup (``checkpoint manager exists so trying to load``), a
  restore's end (Orbax's ``Finished load in S seconds``) or ``No existing
  checkpoints found``, and the compiled train step (``Total estimated memory size``);
- Orbax's ``Finished blocking save in S seconds`` and the training thread's
  ``wait_until_finished`` for the last save.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Mapping, Optional

from gke_ray_tpu.training.driver.progress import WORKER_PID, Progress, parse_line
from gke_ray_tpu.training.goodput import GroupTimes, RunTimes

ABSL_TIME = re.compile(r"\)\S*\s+[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) ")
"""An absl line of a Ray worker: ``(RayTrainWorker pid=1) I1203 18:05:57.558379 ...`` -> ``1203 18:05:57.558379``."""
_DISPATCHED = re.compile(r"Waiting for step (\d+) to finish before checkpoint")
_LOOKUP = "checkpoint manager exists so trying to load this run's existing checkpoint"
_NOTHING_TO_RESTORE = "No existing checkpoints found"
_LOADED = re.compile(r"\] Finished load in [\d.]+ seconds")
_COMPILED = "Total estimated memory size"
_SAVE_BLOCKED = re.compile(r"\] Finished blocking save in ([\d.]+) seconds")
_FINAL_WAIT = re.compile(r"\[thread=TrainingThread[^\]]*\]\[step=\d+\]\[wait_until_finished\] (Waiting|Done waiting) for")
"""The training thread itself waiting for a save (MaxText does it once, at the end); the background threads' waits
overlap training."""
_QUARTER_HOUR = 900.0
_HALF_YEAR = 183 * 86400.0


def absl_seconds(stamp: str, year: int) -> float:
    """``1203 18:05:57.558379`` of ``year`` as if it were UTC (the caller knows the zone)."""
    parsed = datetime.strptime(f"{year}{stamp}", "%Y%m%d %H:%M:%S.%f")
    return parsed.replace(tzinfo=timezone.utc).timestamp()


class _Clock:
    """absl stamps -> epoch seconds, for a job submitted at ``submitted``."""

    def __init__(self, submitted: float, zone_offset_s: float):
        self.submitted, self.offset = submitted, zone_offset_s
        self.year = time.gmtime(submitted).tm_year

    def __call__(self, stamp: str) -> float:
        when = absl_seconds(stamp, self.year) - self.offset
        # absl has no year: a job that crossed New Year's Eve logs January after December.
        return absl_seconds(stamp, self.year + 1) - self.offset if when < self.submitted - _HALF_YEAR else when


def zone_offset(log: str, rank0: set[int], wall_times: Mapping[int, float], submitted: float) -> float:
    """Seconds the workers' clock is ahead of UTC (see the module's docstring)."""
    year = time.gmtime(submitted).tm_year
    for line in reversed(log.splitlines()):
        pid, stamp, step = WORKER_PID.search(line), ABSL_TIME.search(line), parse_line(line)
        if pid and stamp and step and int(pid.group(1)) in rank0 and step.step in wall_times:
            skew = absl_seconds(stamp.group(1), year) - wall_times[step.step]
            return round(skew / _QUARTER_HOUR) * _QUARTER_HOUR
    return float(time.localtime(submitted).tm_gmtoff)


class _Group:
    """What one worker group's lines said, while they are read."""

    def __init__(self, restored_step: Optional[int]):
        self.restored_step = restored_step
        self.first = self.last = None
        self.steps: dict[int, float] = {}
        self.dispatched: Optional[tuple[int, float]] = None
        self.lookup = self.loaded = self.nothing = self.compiled = None
        self.saves: list[tuple[float, float]] = []
        self.waiting: Optional[float] = None

    def seen(self, when: float) -> None:
        self.first = when if self.first is None else min(self.first, when)
        self.last = when if self.last is None else max(self.last, when)

    def rank0(self, line: str, when: float) -> None:
        if (step := parse_line(line)) is not None:
            if step.seconds is not None:
                self.steps[step.step] = step.seconds
        elif m := _DISPATCHED.search(line):
            self.dispatched = self.dispatched or (int(m.group(1)), when)
        elif m := _SAVE_BLOCKED.search(line):
            self.saves.append((when - float(m.group(1)), when))
        elif m := _FINAL_WAIT.search(line):
            if m.group(1) == "Waiting":
                self.waiting = when
            elif self.waiting is not None:
                self.saves.append((self.waiting, when))
                self.waiting = None
        elif _LOOKUP in line:
            self.lookup = self.lookup or when
        elif _NOTHING_TO_RESTORE in line:
            self.nothing = self.nothing or when
        elif _LOADED.search(line):
            self.loaded = self.loaded or when
        elif _COMPILED in line:
            self.compiled = self.compiled or when

    def times(self) -> GroupTimes:
        restore = (self.lookup, self.loaded) if self.lookup is not None and self.loaded is not None else None
        compile_from = self.loaded if restore else (self.nothing or self.lookup)
        return GroupTimes(
            first_seen=self.first,
            last_seen=self.last,
            steps=dict(self.steps),
            dispatched=self.dispatched if self.dispatched and self.dispatched[0] in self.steps else None,
            restore=restore,
            restored_step=self.restored_step,
            compile=(compile_from, self.compiled) if compile_from is not None and self.compiled is not None else None,
            saves=tuple(self.saves),
        )


def read_times(log: str, submitted: float, ended: float, wall_times: Mapping[int, float] | None = None) -> RunTimes:
    """The timeline of the job whose whole log is ``log``; ``wall_times``: step -> wall time in the event files."""
    progress = Progress()
    progress.feed(log)
    progress.flush()
    started = [group for group in progress.groups if group.ranks]
    owner = {pid: index for index, group in enumerate(started) for pid in group.ranks}
    rank0 = {pid for group in started for pid, rank in group.ranks.items() if rank == 0}
    clock = _Clock(submitted, zone_offset(log, rank0, wall_times or {}, submitted))
    groups = [_Group(group.restored_step) for group in started]
    for line in log.splitlines():
        pid, stamp = WORKER_PID.search(line), ABSL_TIME.search(line)
        if not (pid and stamp) or int(pid.group(1)) not in owner:
            continue
        group, when = groups[owner[int(pid.group(1))]], clock(stamp.group(1))
        group.seen(when)
        if int(pid.group(1)) in rank0:
            group.rank0(line, when)
    return RunTimes(submitted, ended, tuple(group.times() for group in groups if group.first is not None))
