"""Where a run's wall time went: goodput buckets that add up to the time from submission to the end.

Pure accounting, no I/O: :func:`account` takes a :class:`RunTimes` (read from the
job's log, Ray's job record and MaxText's event files by
``gke_ray_tpu.training.driver.timeline``) and lays every second of the wall time into exactly
one bucket. Where two explanations overlap, the one named first in
:data:`PRECEDENCE` wins (a checkpoint save happens inside a step's seconds, so
it is taken out of the productive time rather than counted twice); a second no
explanation covers is ``other``.

- ``checkpoint_save``: the training loop blocked on a checkpoint: Orbax's blocking
  part of each save, and waiting for the last save before the job ends. The
  background part of an asynchronous save overlaps training and costs nothing here.
- ``lost_progress``: work a restart threw away: a worker group's steps after the
  checkpoint the next group restored (MaxText trains them again), and what the
  group ran after its last logged step until it died.
- ``productive``: the steps whose result the run kept, timed by MaxText's own
  per-step seconds, laid end to end from the moment MaxText dispatched the
  group's first checkpointed step.
- ``recovery``: from a worker group's last log line to the next group's first
  step: noticing the failure, new worker processes, imports, and the restore and
  recompilation of the restarted group.
- ``checkpoint_restore``: restoring a checkpoint when the job started (a resubmitted
  attempt resuming its run); a restore after a restart is recovery.
- ``compilation``: tracing and compiling the train step before the first step.
- ``startup``: the rest of submission to the first step: scheduling, the runtime
  env, Ray Train's controller and workers, imports, JAX and the mesh.
- ``other``: what nothing above explains, mostly the end of a job after its last
  step (the final metrics flush, processes exiting).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Mapping, Optional

BUCKETS = (
    "productive", "startup", "compilation", "checkpoint_save", "checkpoint_restore", "recovery", "lost_progress", "other",
)
"""The order a person reads them in: the useful time first, the unexplained last."""
PRECEDENCE = ("checkpoint_save", "lost_progress", "productive", "recovery", "checkpoint_restore", "compilation", "startup")
LABELS = {
    "productive": "productive steps",
    "startup": "start-up",
    "compilation": "compilation",
    "checkpoint_save": "checkpoint saving",
    "checkpoint_restore": "checkpoint restoring",
    "recovery": "recovery after restarts",
    "lost_progress": "lost progress (steps run again)",
    "other": "other",
}

Span = tuple[float, float]
"""(start, end), epoch seconds."""


@dataclass(frozen=True)
class GroupTimes:
    """One start of the job's worker group, in epoch seconds."""

    first_seen: float
    last_seen: float
    """The first and last log line of any of its workers (for a group that died: about when it died)."""
    steps: Mapping[int, float] = field(default_factory=dict)
    """MaxText's seconds per step, as its rank 0 logged them (the time since the previous step was dispatched)."""
    dispatched: Optional[tuple[int, float]] = None
    """(step, when MaxText had dispatched it): its first "Waiting for step N ... before checkpoint" line."""
    restore: Optional[Span] = None
    """Looking up and loading the checkpoint it started from (None: it started from scratch)."""
    restored_step: Optional[int] = None
    compile: Optional[Span] = None
    """From the checkpoint lookup (or restore) to MaxText's compiled train step."""
    saves: tuple[Span, ...] = ()
    """When the training loop blocked on a checkpoint save."""

    def step_ends(self) -> dict[int, float]:
        """When each step's seconds ended, or {} when nothing ties the steps to the clock."""
        order = sorted(self.steps)
        ends = dict(zip(order, accumulate(self.steps[step] for step in order)))
        if self.dispatched is not None and self.dispatched[0] in ends:
            step, when = self.dispatched
        elif self.compile is not None and order:
            # No checkpointed step: the loop starts right after the compiled-memory line.
            step, when = order[0], self.compile[1] + self.steps[order[0]]
        else:
            return {}
        shift = when - ends[step]
        return {step: end + shift for step, end in ends.items()}

    def training_start(self) -> Optional[float]:
        ends = self.step_ends()
        if not ends:
            return None
        first = min(ends)
        return ends[first] - self.steps[first]


@dataclass(frozen=True)
class RunTimes:
    """What the accounting needs of one job: its wall time and each start of its worker group."""

    submitted: float
    ended: float
    groups: tuple[GroupTimes, ...] = ()


@dataclass(frozen=True)
class Goodput:
    """The wall time of one job in buckets (seconds), and what it cost at ``usd_per_hour``."""

    wall_s: float
    buckets: Mapping[str, float]
    usd_per_hour: Optional[float]
    """The chips' price per hour (0 for a local run; None when this machine has no price for them)."""
    restarts: int = 0
    rerun_steps: int = 0
    """Steps a restart made MaxText train again."""

    @property
    def productive_s(self) -> float:
        return self.buckets["productive"]

    @property
    def goodput_pct(self) -> float:
        return 100.0 * self.productive_s / self.wall_s if self.wall_s > 0 else 0.0

    def percent(self, bucket: str) -> float:
        return 100.0 * self.buckets[bucket] / self.wall_s if self.wall_s > 0 else 0.0

    def usd(self, bucket: str) -> Optional[float]:
        return None if self.usd_per_hour is None else self.buckets[bucket] / 3600 * self.usd_per_hour

    def to_json(self) -> dict:
        return {
            "wall_s": self.wall_s,
            "productive_s": self.productive_s,
            "goodput_pct": self.goodput_pct,
            "buckets": dict(self.buckets),
            "usd_per_hour": self.usd_per_hour,
            "usd": None if self.usd_per_hour is None else {name: self.usd(name) for name in BUCKETS},
            "restarts": self.restarts,
            "rerun_steps": self.rerun_steps,
        }

    def line(self) -> str:
        """``goodput 58.1%: 24.2 s of 41.6 s trained; start-up 9.9 s, ...`` (the non-zero buckets, and the TPU cost)."""
        rest = [f"{LABELS[name]} {self.buckets[name]:.1f} s" for name in BUCKETS[1:] if self.buckets[name] >= 0.05]
        cost = f" (${self.wall_s / 3600 * self.usd_per_hour:,.2f} of TPU time)" if self.usd_per_hour else ""
        text = f"goodput {self.goodput_pct:.1f}%: {self.productive_s:.1f} s of {self.wall_s:.1f} s trained{cost}"
        return text + (f"; {', '.join(rest)}" if rest else "")

    def table(self) -> str:
        """The buckets as a person reads them: seconds, share of the wall time, money."""
        money = self.usd_per_hour is not None
        head = f"  {'':<32}{'seconds':>10}{'share':>9}" + (f"{'USD':>11}" if money else "")
        lines = [head]
        for name in (*BUCKETS, None):
            label, seconds = (LABELS[name], self.buckets[name]) if name else ("wall time, submission to end", self.wall_s)
            share = self.percent(name) if name else 100.0
            row = f"  {label:<32}{seconds:>10.1f}{share:>8.1f}%"
            if money:
                row += f"{(self.usd(name) if name else self.wall_s / 3600 * self.usd_per_hour):>11,.2f}"
            lines.append(row)
        restarts = (f"{self.restarts} restart{'s' * (self.restarts != 1)}, "
                    f"{self.rerun_steps} step{'s' * (self.rerun_steps != 1)} run again")
        price = "not priced here" if not money else f"${self.usd_per_hour:,.2f}/h"
        return "\n".join([f"goodput {self.goodput_pct:.1f}% ({restarts}; {price})", *lines])


def account(run: RunTimes, usd_per_hour: Optional[float]) -> Goodput:
    """Lay the job's wall time into :data:`BUCKETS`; they add up to ``ended - submitted``."""
    totals = _partition(_spans(run), run.submitted, run.ended)
    rerun = 0
    for group, following in zip(run.groups, run.groups[1:]):
        kept = following.restored_step if following.restored_step is not None else -1
        rerun += sum(step > kept for step in group.steps)
    return Goodput(
        wall_s=max(run.ended - run.submitted, 0.0),
        buckets=totals,
        usd_per_hour=usd_per_hour,
        restarts=max(len(run.groups) - 1, 0),
        rerun_steps=rerun,
    )


def _spans(run: RunTimes) -> list[tuple[str, float, float]]:
    spans: list[tuple[str, float, float]] = []
    groups = run.groups
    for index, group in enumerate(groups):
        following = groups[index + 1] if index + 1 < len(groups) else None
        ends = group.step_ends()
        start = group.training_start()
        # A group that never trained still took time up to its last line: start-up or recovery.
        until = start if start is not None else group.last_seen
        if index == 0:
            spans.append(("startup", run.submitted, until))
            if group.restore is not None:
                spans.append(("checkpoint_restore", *group.restore))
            if group.compile is not None:
                spans.append(("compilation", *group.compile))
        else:
            spans.append(("recovery", groups[index - 1].last_seen, until))
        spans.extend(("checkpoint_save", *save) for save in group.saves)
        if not ends:
            continue
        kept_until = max(ends) if following is None else (
            following.restored_step if following.restored_step is not None else -1
        )
        kept = [step for step in ends if step <= kept_until]
        if kept:
            spans.append(("productive", start, ends[max(kept)]))
        if following is not None:
            spans.append(("lost_progress", ends[max(kept)] if kept else start, max(group.last_seen, max(ends.values()))))
    return spans


def _partition(spans: list[tuple[str, float, float]], start: float, end: float) -> dict[str, float]:
    """Seconds of [start, end] per bucket: each moment goes to the highest-precedence span covering it."""
    rank = {name: position for position, name in enumerate(PRECEDENCE)}
    edges = []
    for name, low, high in spans:
        low, high = max(low, start), min(high, end)
        if high > low:
            edges += [(low, 1, rank[name]), (high, -1, rank[name])]
    edges.sort()
    totals = dict.fromkeys(BUCKETS, 0.0)
    active = [0] * len(PRECEDENCE)
    now = start
    for when, delta, position in edges:
        if when > now:
            totals[_covering(active)] += when - now
            now = when
        active[position] += delta
    if end > now:
        totals["other"] += end - now
    return totals


def _covering(active: list[int]) -> str:
    return next((PRECEDENCE[position] for position, count in enumerate(active) if count > 0), "other")
