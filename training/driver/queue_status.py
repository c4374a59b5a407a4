"""Where a run stands in the stack's queue, read from Kueue: the submit command's side of ``core.kueue``.

On a stack whose runs bring their own cluster, every run's RayJob waits in the
stack's LocalQueue (``TpuQueue``). Kueue makes a Workload of it, labelled with
the RayJob's UID, and says in its conditions and events whether the run is
queued (and behind what), waiting for GKE's queued provisioning, admitted,
evicted for slices that did not all come and requeued, or given up; an elastic
run that grows gets a new Workload for its larger size. :class:`RunInQueue`
reads them as one line (``core.kueue.workload_line``), and refuses, before the
RayJob is created, a run the queue could never admit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Mapping, Optional

from gke_ray_tpu.core import kueue
from gke_ray_tpu.training.driver.errors import ClusterError

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


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
        """Refuse, naming ``--slices``, a run the ClusterQueue could never admit at its full size (its quota and what
        it may borrow); a user who may not read ClusterQueues gets a note and the run is queued unchecked."""
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
        asked = kueue.usage(kueue.ray_job_pod_sets(manifest, grown=True))
        # The stack's Kueue counts only what its queue covers; a cluster's own Kueue checks every resource.
        installed = self.outputs.pods_ready_timeout_s is not None
        kueue.check_admissible(asked, kueue.queue_capacity(queue), "--slices", slices, ignore_undeclared=installed)

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
        workload = kueue.current_workload(self.workloads(ray_job))
        if workload is None:
            return Standing(f"waiting for Kueue to take the run into {self.outputs.local_queue}", None)
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        line = kueue.workload_line(workload, self.events(workload), now=now, wait=self.outputs.queue_wait)
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
