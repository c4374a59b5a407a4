"""Where a run stands in the stack's queue, read from Kueue: the submit command's side of ``core.kueue``, and a
Workload read back as one line for a person (:func:`workload_line`).

On a stack whose runs bring their own cluster, every run's RayJob waits in the
stack's LocalQueue (``TpuQueue``). Kueue makes a Workload of it, labelled with
the RayJob's UID, and says in its conditions and events whether the run is
queued (and behind what), waiting for GKE's queued provisioning, admitted,
evicted for slices that did not all come and requeued, or given up; an elastic
run that grows gets a new Workload for its larger size. :class:`RunInQueue`
reads them as one line (:func:`workload_line`), and refuses, before the
RayJob is created, a run the queue could never admit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, Optional, Sequence

from gke_ray_tpu.core import kueue, kueue_admission, kueue_quota
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kueue_waiting import WaitSettings
from gke_ray_tpu.training.driver.errors import ClusterError

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


# --- A Workload, read back for a person ------------------------------------------------------------------------

def parse_time(value: str) -> datetime:
    """An RFC 3339 time as the API server writes it (``2026-12-04T06:00:00Z``)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(timezone.utc)


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S UTC")


def _conditions(workload: Mapping) -> dict[str, Mapping]:
    return {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}


def _true(conditions: Mapping[str, Mapping], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def current_workload(workloads: Iterable[Mapping]) -> Optional[Mapping]:
    """The Workload that stands for a run now: the newest that has not finished (an elastic run that grew has
    older, finished slices), else the newest."""
    ordered = sorted(workloads, key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "")
    live = [w for w in ordered if not _true(_conditions(w), "Finished")]
    return (live or ordered or [None])[-1]


def workload_line(workload: Mapping, events: Sequence[Mapping] = (), *, now: datetime,
                  position: Optional[int] = None, wait: Optional[WaitSettings] = None) -> str:
    """Where a run stands in Kueue, in one line: queued (and behind what), waiting for provisioning, admitted,
    evicted for slow slices and requeued (when), given up, or finished.

    From the Workload's conditions (``apis/kueue/v1beta2/workload_types.go``), its admission and requeue state,
    and its events (the newest ``Pending`` message when the conditions carry none: Kueue writes a pending reason
    only for the Workloads it tried to admit). ``position`` in the LocalQueue comes from Kueue's visibility API,
    when read; ``wait``: the queue's settings, to say when an admitted run's pods time out."""
    conditions = _conditions(workload)
    if _true(conditions, "Finished"):
        finished = conditions["Finished"]
        return f"finished ({finished.get('reason')}): {finished.get('message')}"
    evicted = conditions.get("Evicted") or {}
    deactivated = (workload.get("spec") or {}).get("active") is False
    if deactivated or (evicted.get("status") == "True" and str(evicted.get("reason", "")).startswith("Deactivated")):
        # Kueue clears the requeue count when it deactivates a Workload; the limit it reached is the queue's.
        after = (f" after {wait.requeue_limit} requeue{'s' * (wait.requeue_limit != 1)}"
                 if wait is not None and wait.requeue_limit is not None else "")
        return (f"given up: Kueue deactivated the run{after} ({evicted.get('message') or 'spec.active is false'}); "
                "delete its RayJob, or set its Workload's spec.active to true to queue it again")
    if _true(conditions, "QuotaReserved") and not _true(conditions, "Evicted"):
        return _admitted_line(workload, conditions, wait)
    if evicted.get("status") == "True":
        return _evicted_line(workload, conditions, events, now, position)
    return _queued_line(workload, conditions, events, position)


def _admitted_line(workload: Mapping, conditions: Mapping[str, Mapping], wait: Optional[WaitSettings]) -> str:
    status = workload.get("status") or {}
    queue = (status.get("admission") or {}).get("clusterQueue", "its ClusterQueue")
    if not _true(conditions, "Admitted"):
        checks = [c for c in status.get("admissionChecks") or [] if c.get("state") != "Ready"]
        said = "; ".join(f"{c.get('name')}: {c.get('state')}{' - ' + c['message'] if c.get('message') else ''}"
                         for c in checks)
        return f"waiting for provisioning: quota reserved in {queue}, {said or 'admission checks pending'}"
    if _true(conditions, "PodsReady"):
        return f"admitted by {queue}; all its pods are ready"
    admitted_at = parse_time(conditions["Admitted"]["lastTransitionTime"])
    line = f"admitted by {queue} at {_clock(admitted_at)}; waiting for its pods"
    if wait is not None:
        deadline = datetime.fromtimestamp(admitted_at.timestamp() + wait.timeout_s, timezone.utc)
        line += f" (if they are not all ready by {_clock(deadline)}, Kueue evicts the run and requeues it)"
    return line


def _evicted_line(workload: Mapping, conditions: Mapping[str, Mapping], events: Sequence[Mapping],
                  now: datetime, position: Optional[int]) -> str:
    evicted = conditions["Evicted"]
    requeue = (workload.get("status") or {}).get("requeueState") or {}
    reason = evicted.get("reason")
    cause = ("evicted for slow slices (its pods were not all ready in time)" if reason == kueue.EVICTED_BY_PODS_READY_TIMEOUT
             else f"evicted ({reason}: {evicted.get('message')})")
    if _true(conditions, "QuotaReserved"):
        return f"{cause}; KubeRay is deleting its cluster"
    count = requeue.get("count")
    nth = f" (requeue {count})" if count else ""
    if requeue.get("requeueAt") and not _true(conditions, "Requeued"):
        at = parse_time(requeue["requeueAt"])
        wait_s = max(0, math.ceil(at.timestamp() - now.timestamp()))
        return f"{cause}; back in the queue at {_clock(at)} (in {wait_s} s){nth}"
    return f"{cause}; requeued{nth}, " + _queued_line(workload, conditions, events, position)


def _queued_line(workload: Mapping, conditions: Mapping[str, Mapping], events: Sequence[Mapping],
                 position: Optional[int]) -> str:
    queue = (workload.get("spec") or {}).get("queueName", "its LocalQueue")
    where = f"queued in {queue}" + (f" at position {position}" if position is not None else "")
    reserved = conditions.get("QuotaReserved") or {}
    message = reserved.get("message") if reserved.get("status") == "False" else None
    if message and message == (conditions.get("Evicted") or {}).get("message"):
        message = None  # Kueue keeps the eviction's message there until it next tries to admit the run
    pending = [e for e in events if e.get("reason") == "Pending"]
    if not message and pending:
        message = max(pending, key=lambda e: e.get("lastTimestamp") or "").get("message")
    return f"{where}: {message}" if message else f"{where}, behind the runs before it"


# --- The queue as one run sees it -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Standing:
    """A run's place in the queue at one look."""

    line: str
    """What Kueue says of the run, for a person (``workload_line``)."""
    slices: Optional[int]
    """The slices its current Workload asks for (None: no Workload yet)."""
    given_up: bool = False
    """Kueue deactivated it (its slices never all came, past the requeue limit): it will not start again by itself."""

    def said(self) -> str:
        size = "" if self.slices is None else f" [{self.slices} slice{'s' * (self.slices != 1)}]"
        return f"Kueue: {self.line}{size}"

    @property
    def news(self) -> str:
        """What counts as a change: the line less its countdown (``(in 47 s)`` changes at every look)."""
        return _COUNTDOWN.sub("", self.said())


_COUNTDOWN = re.compile(r" \(in \d+ s\)")


class RunInQueue:
    """The stack's queue as one run sees it, through ``call`` (``RunClusters``' bounded, retried API calls)."""

    def __init__(self, core, custom, namespace: str, outputs, call: Callable, clock: Callable[[], float]):
        self.core, self.custom, self.namespace = core, custom, namespace
        self.outputs, self.call, self.clock = outputs, call, clock
        self.hosts = int(outputs.hosts_per_slice)

    def check_admissible(self, manifest: Mapping, slices: int, log: Callable[[str], None]) -> None:
        """Refuse, naming ``--slices``, a run the ClusterQueue could never admit at its full size: Kueue's flavor
        assignment over the queue, empty and lent what it may borrow, and its ResourceFlavors
        (``core.kueue_admission.admission_problem``). A user who may not read ClusterQueues gets a note and the run
        is queued unchecked; one who may not read ResourceFlavors, a note and a check of the quota alone. The DCN
        NICs a cluster's own Kueue counts are not (the queue's NICs come with its chips)."""
        from kubernetes.client.exceptions import ApiException

        name = self.outputs.cluster_queue
        try:
            queue = self.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
        except ApiException as e:
            if e.status in (401, 403, 404):
                log(f"cannot read ClusterQueue {name} ({e.status} {e.reason}): not checked that it can ever admit "
                    "this run")
                return
            raise ClusterError(f"reading ClusterQueue {name} ({e.status} {e.reason})") from None
        flavors = self._flavors(queue, log)
        installed = self.outputs.pods_ready_timeout_s is not None
        problem = kueue_admission.admission_problem(kueue_quota.ray_job_pod_sets(manifest, grown=True), queue, flavors,
                                                    kueue.quota_check_strategy(installed))
        if problem:
            raise ConfigError("--slices", slices, f"a run ClusterQueue {name} can admit: {problem}")

    def _flavors(self, queue: Mapping, log: Callable[[str], None]) -> dict[str, Mapping]:
        """The ResourceFlavors the ClusterQueue names (one gone is left out, as Kueue finds it gone); any that may
        not be read are taken as labelless, with a note."""
        from kubernetes.client.exceptions import ApiException

        found: dict[str, Mapping] = {}
        for group in (queue.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                try:
                    found[flavor["name"]] = self.custom.get_cluster_custom_object(GROUP, VERSION, "resourceflavors",
                                                                                   flavor["name"])
                except ApiException as e:
                    if e.status == 404:
                        continue
                    if e.status not in (401, 403):
                        raise ClusterError(f"reading ResourceFlavor {flavor['name']} ({e.status} {e.reason})") from None
                    log(f"cannot read ResourceFlavor {flavor['name']} ({e.status} {e.reason}): its node labels and "
                        "taints are not checked against the run's pods")
                    found[flavor["name"]] = {"metadata": {"name": flavor["name"]}, "spec": {}}
        return found

    def workloads(self, ray_job: Mapping) -> list[dict]:
        uid = (ray_job.get("metadata") or {}).get("uid")
        if not uid:
            return []
        listed = self.call(f"listing the Workloads of RayJob {ray_job['metadata']['name']}", lambda: (
            self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "workloads",
                                                      label_selector=f"{kueue.JOB_UID_LABEL}={uid}")))
        return list(listed.get("items") or [])

    def events(self, workload: Mapping) -> list[dict]:
        name = workload["metadata"]["name"]
        listed = self.call(f"listing the events of namespace {self.namespace}",
                           lambda: self.core.list_namespaced_event(self.namespace).items)
        return [{"reason": e.reason, "message": e.message, "type": e.type,
                 "lastTimestamp": str(e.last_timestamp or e.event_time or "")}
                for e in listed if e.involved_object.kind == "Workload" and e.involved_object.name == name]

    def standing(self, ray_job: Mapping) -> Standing:
        workload = current_workload(self.workloads(ray_job))
        if workload is None:
            return Standing(f"waiting for Kueue to take the run into {self.outputs.local_queue}", None)
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        line = workload_line(workload, self.events(workload), now=now, wait=self.outputs.queue_wait)
        given_up = (workload.get("spec") or {}).get("active") is False
        return Standing(line, self._slices(workload), given_up)

    def _slices(self, workload: Mapping) -> Optional[int]:
        tpu = [s for s in (workload.get("spec") or {}).get("podSets") or [] if s.get("name") != kueue.HEAD_POD_SET
               and s.get("name") != "submitter"]
        return sum(int(s.get("count", 0)) for s in tpu) // self.hosts if tpu else None


class Watch:
    """Says, at most every ``every_s``, what changed in a running run's place in the queue: an elastic run's
    growth asked for, queued behind other runs, admitted. Called as the job's log streams."""

    def __init__(self, queue: RunInQueue, read: Callable[[], Mapping], log: Callable[[str], None], every_s: float,
                 said: str = ""):
        self.queue, self.read, self.log, self.every_s = queue, read, log, every_s
        self.said, self.at = said, float("-inf")

    def __call__(self) -> None:
        if self.queue.clock() - self.at < self.every_s:
            return
        self.at = self.queue.clock()
        now = self.queue.standing(self.read())
        if now.news != self.said:
            self.log(now.said())
            self.said = now.news
