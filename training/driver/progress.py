"""Training progress, read from MaxText's and Ray Train's own log lines.

MaxText (``common/metric_logger.py``) prints one line per step, e.g.::

    completed step: 99, seconds: 0.693, TFLOP/s/device: 83.171, Tokens/s/device: 11819.175, total_weights: 262144, loss: 0.334

(0.2.5 appends ``lm_loss`` and ``perplexity``; elastic runs insert ``live slice
count``). Through Ray the line carries a ``(RayTrainWorker pid=...)`` prefix and
sometimes a ``[repeated 6x across cluster]`` suffix; every worker prints it.

A job may start its worker group more than once: Ray Train v2's controller
logs ``Started training worker group of size N:`` and one ``- (ip=..., pid=P)
world_rank=R`` line per worker each time (after a worker died, or an elastic
resize), and MaxText then logs ``restoring from this run's directory step S``
and continues from step S+1. Each start is a ``WorkerGroup``; a worker's lines
are told apart by its pid, so a late line of a dead worker is not mistaken for
the new group's.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

_STEP = re.compile(r"completed step: (\d+)((?:, [^,:]+: [^,\s]+)*)")
_FIELD = re.compile(r", ([^,:]+): ([^,\s]+)")
_GROUP = re.compile(r"Started training worker group of size (\d+)")
_MEMBER = re.compile(r"- \(ip=[^,)]+, pid=(\d+)\) world_rank=(\d+)")
WORKER_PID = re.compile(r"\(RayTrainWorker pid=(\d+)")
"""A Ray Train worker's line, and its pid: a worker is told apart by it."""
_RESTORE = re.compile(r"restoring from this run's directory step (\d+)")
_RESERVE = re.compile(r"Using SlicePlacementGroup utility to reserve (\d+) slice\(s\) with topology '([^']+)'")
_START_TIMEOUT = re.compile(r"worker group startup timed out after ([\d.]+) seconds waiting for (\d+) workers")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX = re.compile(r"^\((?:\w+ )?pid=[^)]*\)\s*")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$")
ERROR_LINE_CHARS = 300
"""An exception line is cut here (MaxText's unknown-key error lists every key)."""
ERROR_LINES = 5
"""How many of the last distinct exception lines are kept (a failed job shows them)."""


@dataclass(frozen=True)
class StepMetrics:
    step: int
    loss: float
    seconds: float | None = None
    tflops_per_device: float | None = None
    tokens_per_device: float | None = None

    def describe(self, total_steps: int | None = None) -> str:
        of = f"/{total_steps}" if total_steps else ""
        parts = [f"step {self.step + 1}{of}", f"loss {self.loss:.3f}"]
        if self.tflops_per_device is not None:
            parts.append(f"{self.tflops_per_device:.3f} TFLOP/s/device")
        if self.tokens_per_device is not None:
            parts.append(f"{self.tokens_per_device:.1f} tokens/s/device")
        if self.seconds is not None:
            parts.append(f"{self.seconds:.3f} s/step")
        return "  ".join(parts)


@dataclass
class WorkerGroup:
    """One start of the job's worker group and what it did."""

    number: int
    workers: int | None = None
    """The group's size (None: the log has no Ray Train controller line)."""
    ranks: dict[int, int] = field(default_factory=dict)
    """pid -> world rank."""
    restored_step: int | None = None
    steps: dict[int, StepMetrics] = field(default_factory=dict)


@dataclass(frozen=True)
class Restarted:
    """News: Ray Train started the worker group again."""

    group: int
    workers: int

    def describe(self, total_steps: int | None = None) -> str:
        return f"worker group {self.group}: Ray Train restarted training with {self.workers} workers"


@dataclass(frozen=True)
class Restored:
    """News: MaxText restored a checkpoint of the run."""

    group: int
    step: int

    def describe(self, total_steps: int | None = None) -> str:
        of = f"/{total_steps}" if total_steps else ""
        return (
            f"worker group {self.group}: MaxText restored checkpoint {self.step} (saved after step "
            f"{self.step + 1}{of}); continuing with step {self.step + 2}{of}"
        )


@dataclass(frozen=True)
class WaitingForSlices:
    """News: Ray Train is reserving TPU slices for a worker group (on a cluster that scales to zero, they start now)."""

    slices: int
    topology: str

    def describe(self, total_steps: int | None = None) -> str:
        return (
            f"waiting for TPU slices: Ray Train reserves {self.slices} slice(s) of {self.topology}; "
            "slices that are not running yet are started by the autoscalers (minutes)"
        )


@dataclass(frozen=True)
class StillWaiting:
    """News: the worker group's resources did not come in time; Ray Train asks again (not a failure)."""

    seconds: float
    workers: int

    def describe(self, total_steps: int | None = None) -> str:
        return (
            f"still waiting for TPU slices after {self.seconds:.0f} s ({self.workers} workers): Ray Train asks "
            "again; check the node pools' scale-up events if this repeats"
        )


News = StepMetrics | Restarted | Restored | WaitingForSlices | StillWaiting


def parse_line(line: str) -> StepMetrics | None:
    """The metrics of one MaxText step line, or None for any other line."""
    m = _STEP.search(line)
    if not m:
        return None
    fields = dict(_FIELD.findall(m.group(2)))
    if "loss" not in fields:
        return None  # a profiler boundary step or a rampup line without a loss
    num = lambda key: float(fields[key]) if key in fields else None  # noqa: E731
    return StepMetrics(
        step=int(m.group(1)),
        loss=float(fields["loss"]),
        seconds=num("seconds"),
        tflops_per_device=num("TFLOP/s/device"),
        tokens_per_device=num("Tokens/s/device"),
    )


def error_line(line: str) -> str | None:
    """``ValueError: ...`` (a traceback's last line), without Ray's prefix, or None."""
    text = _PREFIX.sub("", _ANSI.sub("", line)).strip()
    if not _EXCEPTION.match(text):
        return None
    return text if len(text) <= ERROR_LINE_CHARS else text[: ERROR_LINE_CHARS - 3] + "..."


@dataclass
class Progress:
    """Feed it log chunks as they stream; it keeps one record per step and group.

    Chunks may split lines anywhere. ``feed`` returns what is news: a step the
    current worker group had not reported yet (every worker prints each step), a
    restart of the worker group, and MaxText's restore. ``steps`` is the run's
    final history: a step run again after a restore replaces the earlier record.
    """

    steps: dict[int, StepMetrics] = field(default_factory=dict)
    groups: list[WorkerGroup] = field(default_factory=list)
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=ERROR_LINES))
    """The last distinct exception lines, oldest first."""
    _partial: str = ""

    def feed(self, chunk: str) -> list[News]:
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        news: list[News] = []
        for line in lines:
            news.extend(self._line(line))
        return news

    def flush(self) -> list[News]:
        """Parse a trailing line that had no newline."""
        rest, self._partial = self._partial, ""
        return self.feed(rest + "\n") if rest else []

    def _line(self, line: str) -> list[News]:
        if m := _GROUP.search(line):
            if not self.groups or self.groups[-1].ranks:  # else: the same start, logged twice
                self.groups.append(WorkerGroup(len(self.groups) + 1, workers=int(m.group(1))))
            return []
        if m := _MEMBER.search(line):
            group, pid = self._current(), int(m.group(1))
            if not group.ranks and len(self.groups) > 1 and pid in self.groups[-2].ranks:
                self.groups.pop()  # the same start logged twice (two log monitors on one host)
                return []
            first = not group.ranks
            group.ranks[pid] = int(m.group(2))
            return [Restarted(group.number, group.workers)] if first and group.number > 1 else []
        if m := _RESERVE.search(line):
            return [WaitingForSlices(int(m.group(1)), m.group(2))]
        if m := _START_TIMEOUT.search(line):
            return [StillWaiting(float(m.group(1)), int(m.group(2)))]
        if m := _RESTORE.search(line):
            group = self._group_of(line)
            first = group.restored_step is None
            group.restored_step = int(m.group(1))
            return [Restored(group.number, group.restored_step)] if first else []
        if metrics := parse_line(line):
            group = self._group_of(line)
            new = metrics.step not in group.steps
            group.steps[metrics.step] = self.steps[metrics.step] = metrics
            return [metrics] if new else []
        if (error := error_line(line)) is not None:
            if error in self.errors:
                self.errors.remove(error)
            self.errors.append(error)
        return []

    def _current(self) -> WorkerGroup:
        if not self.groups:
            self.groups.append(WorkerGroup(1))
        return self.groups[-1]

    def _group_of(self, line: str) -> WorkerGroup:
        """The worker group whose worker printed ``line`` (the latest one if unknown)."""
        m = WORKER_PID.search(line)
        if m:
            pid = int(m.group(1))
            for group in reversed(self.groups):
                if pid in group.ranks:
                    return group
        return self._current()

    @property
    def first(self) -> StepMetrics | None:
        return self.steps[min(self.steps)] if self.steps else None

    @property
    def last(self) -> StepMetrics | None:
        return self.steps[max(self.steps)] if self.steps else None
