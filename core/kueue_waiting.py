"""Waiting for a queue's slices: Kueue's ``waitForPodsReady`` settings, what waiting for slices that do not all
come can cost per capacity mode, and KubeRay's deadlines set against Kueue's (Kueue v0.19.2, KubeRay v1.5.1 to
v1.7.0; docs/queues.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

@dataclass(frozen=True)
class WaitSettings:
    """Kueue's ``waitForPodsReady``: a run whose pods are not all ready ``timeout_s`` after admission is evicted
    (its RayJob suspended, so KubeRay deletes its cluster) and requeued after ``base x 2^(n-1)`` seconds, at
    most ``backoff_max_s``; after ``requeue_limit`` requeues Kueue deactivates it (None: it requeues forever).
    Defaults: Kueue's own (``apis/config/v1beta2/defaults.go``), except a finite requeue limit."""

    timeout_s: int = 1800
    requeue_limit: Optional[int] = 3
    backoff_base_s: int = 60
    backoff_max_s: int = 3600

    def backoff_s(self, requeue: int) -> int:
        """Seconds before the ``requeue``-th requeue (1-based), as ``pkg/workload.UpdateRequeueState`` waits
        (less its 0.01% jitter)."""
        return min(self.backoff_base_s * 2 ** (requeue - 1), self.backoff_max_s)


SCALE_DOWN_S = 600
"""Seconds a node stays after its last pod, before the cluster autoscaler removes it: the upstream cluster
autoscaler's ``--scale-down-unneeded-time`` default (kubernetes/autoscaler ``cluster-autoscaler/main.go``).
GKE's own value is not published: unverified."""


@dataclass(frozen=True)
class WaitingCost:
    """The most slice-time a run can be billed while it waits for slices that do not all come."""

    capacity: str
    slices_billed: int
    """Slices that can be up (and billed) while the run still waits: one fewer than it needs to start."""
    seconds_per_attempt: int
    """Kueue's timeout from admission, plus the time GKE takes to remove the slices once their pods are gone."""
    attempts: Optional[int]
    """Admissions that can end this way: requeue limit + 1 (None: Kueue requeues for ever)."""
    why: str

    @property
    def slice_hours(self) -> Optional[float]:
        if self.attempts is None:
            return None
        return self.attempts * self.slices_billed * self.seconds_per_attempt / 3600


def waiting_cost(capacity: str, start_slices: int, wait: WaitSettings, *, queued_provisioning: bool = False,
                 scale_down_s: int = SCALE_DOWN_S) -> WaitingCost:
    """The bound, per capacity mode, for a run that starts once ``start_slices`` slices are up (its minimum
    when elastic). GKE brings a multi-host slice up whole, so one slice alone is never billed half-up."""
    per_attempt = wait.timeout_s + scale_down_s
    attempts = None if wait.requeue_limit is None else wait.requeue_limit + 1
    if capacity == "reservation":
        return WaitingCost(capacity, 0, per_attempt, attempts,
                           "a reservation is billed whether or not its slices run, so waiting adds nothing")
    if queued_provisioning:
        return WaitingCost(capacity, 0, per_attempt, attempts,
                           "queued provisioning admits the run only once GKE has every slice it asked for")
    if start_slices <= 1:
        return WaitingCost(capacity, 0, per_attempt, attempts, "GKE brings a slice up whole; one slice never waits on another")
    return WaitingCost(capacity, start_slices - 1, per_attempt, attempts,
                       f"each slice's node pool scales on its own: up to {start_slices - 1} can be up while the "
                       f"last never comes, until Kueue's {wait.timeout_s} s timeout evicts the run and GKE "
                       f"removes the nodes (~{scale_down_s} s)")


QUEUED_DEADLINE_MARGIN_S = 300
"""How far a queued run's ``preRunningDeadlineSeconds`` lies past Kueue's PodsReady timeout: KubeRay starts counting
when it sees the RayJob unsuspended, a moment after Kueue admitted it, so the margin only has to cover Kueue's
own reconcile; it keeps KubeRay's deadline behind Kueue's eviction whatever the lag."""


def queued_pre_running_deadline(timeout_s: Optional[int]) -> int:
    """A queued run's ``preRunningDeadlineSeconds``: past Kueue's PodsReady timeout (``timeout_s``; None: a
    cluster's own Kueue, assumed to keep Kueue's default), so Kueue's eviction, which sends the run back to the
    queue and releases its slices, always comes first; KubeRay's deadline, which fails the run or retries it
    within the same admission (:func:`deadline_problems`), stays as a backstop should Kueue not wait at all."""
    return (WaitSettings().timeout_s if timeout_s is None else timeout_s) + QUEUED_DEADLINE_MARGIN_S


def deadline_problems(pre_running_deadline_s: Optional[int], backoff_limit: int, wait: WaitSettings) -> list[str]:
    """How KubeRay's own deadline would cut across Kueue's: KubeRay counts ``preRunningDeadlineSeconds`` from each
    (re)admission (``initRayJobStatusIfNeed`` resets the start time) and retries a ``PreRunningDeadlineExceeded``
    while ``backoffLimit`` allows, on a new cluster within the same admission; a RayJob out of retries is
    Failed, and Kueue finishes its Workload instead of requeueing it."""
    if pre_running_deadline_s is None or pre_running_deadline_s > wait.timeout_s:
        return []
    outcome = ("fails the run instead of sending it back to the queue" if backoff_limit == 0
               else f"recreates its cluster up to {backoff_limit} times within one admission, then fails the run")
    return [f"preRunningDeadlineSeconds {pre_running_deadline_s} is not above Kueue's {wait.timeout_s} s "
            f"waitForPodsReady timeout: KubeRay {outcome}"]
