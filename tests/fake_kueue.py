"""A fake Kueue (v0.19.2) in front of the fake KubeRay, for runs submitted to a stack's queue.

What it does, and where Kueue does it:

* A RayJob labelled for the stack's LocalQueue passes Kueue's webhook (``core.kuberay.ray_job_problems``,
  refused with a 403 otherwise), is created suspended (``jobframework.ApplyDefaultForSuspend``) and gets a
  Workload named as Kueue names it (``jobframework/workload_names.go``) with the RayJob's pod sets.
* Each read of a RayJob or a Workload is ``seconds_per_read`` later, and Kueue acts before KubeRay, whose
  controllers then move every RayJob on (not only the one read):
  - a finished RayJob finishes its Workload, which releases its quota;
  - an admitted Workload's ``PodsReady`` follows the RayJob's ``rayClusterStatus.state`` (``RayJob.PodsReady``,
    ``jobframework.generatePodsReadyCondition``);
  - one admitted ``timeout_s`` ago whose pods are not all ready is evicted (``PodsReadyTimeout``, the RayJob
    suspended, so KubeRay deletes its cluster) and waits ``base x 2^(n-1)`` seconds before it is queued again
    (``core/workload_controller.go`` reconcileNotReadyTimeout, ``workload.UpdateRequeueState``); past the
    requeue limit it is deactivated instead; its quota is released once KubeRay has suspended the RayJob;
  - then the queue is walked in order (creation time, or the eviction time of a requeued run): a run that fits
    the free quota is admitted (``QuotaReserved``, ``Admitted``, the RayJob unsuspended); one that does not gets
    Kueue's pending message, and under StrictFIFO holds back every run behind it.

* An elastic run (``kueue.x-k8s.io/elastic-job``, in-tree autoscaling): Kueue counts its RayCluster's live size
  (``raycluster/common.go`` UpdatePodSets); when Ray's autoscaler has raised it, a new Workload slice for the whole
  new size is queued (named with the job's and the RayCluster's generations, ``GetWorkloadNameExtraPart``) and,
  once the quota the old slice frees plus the free quota fits it, admitted while the old slice finishes
  (``WorkloadSliceReplaced``, ``pkg/workloadslicing``); the cluster's pods keep Kueue's scheduling gate until the
  slice that counts them is admitted (``pkg/controller/elasticjobs/elastic_job_ungater.go``).
* ``slice_seconds``: for every TPU slice whose hosts are all up, the seconds it was up: what a run is billed for
  while it waits, as GKE bills a multi-host slice whole (the fake removes a pod's node with the pod).

Only the resources the ClusterQueue covers are counted, as by the stack's Kueue (``IgnoreUndeclared``).
Conditions, reasons and messages are Kueue's (``apis/kueue/v1beta2/workload_types.go``, ``pkg/scheduler``,
``pkg/workload``). Not modelled: admission checks (queued provisioning), cohorts and preemption, priorities.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Optional

from kubernetes import client as k8s

from gke_ray_tpu.core import kueue, kueue_quota, kueue_waiting, quantities
from gke_ray_tpu.core.kuberay import ray_job_problems
from gke_ray_tpu.training.driver import queue_status
from tests.fakes import REPLICA_INDEX_LABEL, FakeKubeRay
from tests.schemas import validate_writes

REPLACEMENT_FOR = "kueue.x-k8s.io/workload-slice-replacement-for"
"""The annotation on a new Workload slice naming the slice it replaces (``pkg/workloadslicing``)."""

START = datetime(2026, 12, 4, 6, 0, 0, tzinfo=timezone.utc)


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def workload_name(job_name: str, uid: str, extra: str = "") -> str:
    """``GenerateWorkloadNameWithExtra`` for a RayJob: ``rayjob-<name>-<sha1(kind, group, name, uid[, extra])[:5]>``."""
    digest = hashlib.sha1("\n".join(["RayJob", "ray.io", job_name, uid, *([extra] if extra else [])]).encode()).hexdigest()
    return f"rayjob-{job_name}-{digest[:5]}"


def condition(kind: str, status: bool, reason: str, message: str, now: datetime) -> dict:
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message,
            "lastTransitionTime": rfc3339(now), "observedGeneration": 1}


class FakeKueue:
    """Kueue over ``kube`` for one ClusterQueue and its LocalQueue (manifests as ``components.queue_manifests`` builds them).

    ``core`` and ``custom`` stand in for the Kubernetes APIs the submit command uses: RayJobs go through Kueue
    to KubeRay, Workloads are Kueue's, and the events are both's.
    """

    def __init__(self, kube: FakeKubeRay, cluster_queue: dict, local_queue: dict, *,
                 wait: kueue_waiting.WaitSettings = kueue_waiting.WaitSettings(), seconds_per_read: int = 60):
        self.kube = kube
        kube.seconds_per_read = seconds_per_read
        self.cluster_queue = cluster_queue
        self.local_queue = local_queue
        self.wait = wait
        self.seconds_per_read = seconds_per_read
        self.seconds = 0
        self.workloads: dict[str, dict] = {}
        self.events: list[k8s.CoreV1Event] = []
        self.evictions: list[str] = []
        """Workload names, one per eviction for a PodsReady timeout."""
        self.slice_seconds = 0
        """Seconds of TPU slices up (all their hosts), summed over slices: what waiting and training were billed."""
        self.received: list[dict] = []
        """Every RayJob as its creator sent it, before Kueue's webhook defaulted it."""
        self.peak_slices: dict[str, int] = {}
        """The most whole slices each RayCluster had up at once."""
        self.flavor_of = {resource: flavor["name"] for group in cluster_queue["spec"]["resourceGroups"]
                          for flavor in group["flavors"] for resource in group["coveredResources"]}
        self.quota = kueue_quota.queue_capacity(cluster_queue).most
        self.core = _KueueCore(self)
        self.custom = _KueueCustom(self)

    @property
    def now(self) -> datetime:
        return START + timedelta(seconds=self.seconds)

    @property
    def queue_name(self) -> str:
        return self.local_queue["metadata"]["name"]

    # --- a RayJob enters the queue --------------------------------------------------------------------------

    def admit_to_queue(self, body: dict) -> dict:
        """Kueue's webhooks on a new RayJob in the queue: refuse, or default ``suspend`` (and give it its UID)."""
        problems = ray_job_problems(body)
        if problems:
            raise k8s.ApiException(status=403, reason=f'admission webhook "vrayjob.kb.io" denied the request: '
                                                      f'{"; ".join(problems)}')
        body = copy.deepcopy(body)
        body["spec"]["suspend"] = True
        body["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{body['metadata']['name']}/{len(self.workloads)}"))
        return body

    def create_workload(self, job: dict, counts: Optional[dict] = None, replaces: Optional[dict] = None) -> dict:
        """The Workload of ``job``; ``counts`` (pod set -> pods): an elastic run's new size, as a slice that
        ``replaces`` the admitted one."""
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        elastic = _elastic(job)
        extra = "" if not elastic else ("1" if replaces is None else f"1_{self._generation(job)}")
        pod_sets = [{"name": s.name, "count": (counts or {}).get(s.name, s.count), "template": self._template(job, s.name)}
                    for s in kueue_quota.ray_job_pod_sets(job)]
        workload = {
            "apiVersion": kueue.API_VERSION, "kind": "Workload",
            "metadata": {
                "name": workload_name(name, uid, extra), "namespace": job["metadata"]["namespace"],
                "labels": {kueue.JOB_UID_LABEL: uid}, "creationTimestamp": rfc3339(self.now),
                "annotations": {kueue.ELASTIC_JOB_ANNOTATION: "true"} if elastic else {},
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name, "uid": uid,
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": {"queueName": self.queue_name, "podSets": pod_sets, "active": True},
            "status": {},
        }
        if replaces is not None:
            workload["metadata"]["annotations"][REPLACEMENT_FOR] = (
                f"{replaces['metadata']['namespace']}/{replaces['metadata']['name']}")
        self.workloads[workload["metadata"]["name"]] = workload
        self._event("RayJob", name, "Normal", "CreatedWorkload",
                    f"Created Workload: {job['metadata']['namespace']}/{workload['metadata']['name']}")
        return workload

    def _generation(self, job: dict) -> int:
        """The RayCluster's generation: 1, and one more for each size Ray's autoscaler gave it."""
        return 1 + sum(1 for w in self.workloads.values() if self._job(w) is job)

    @staticmethod
    def _template(job: dict, pod_set: str) -> dict:
        cluster = job["spec"]["rayClusterSpec"]
        if pod_set == kueue.HEAD_POD_SET:
            return copy.deepcopy(cluster["headGroupSpec"]["template"])
        group = next(g for g in cluster["workerGroupSpecs"] if g["groupName"] == pod_set)
        return copy.deepcopy(group["template"])

    # --- Kueue's loop, once per read -------------------------------------------------------------------------

    def tick(self) -> None:
        self.seconds += self.seconds_per_read
        self._bill()
        for workload in list(self.workloads.values()):
            self._sync(workload)
        self._schedule()
        for job in list(self.kube.ray_jobs.values()):
            self.kube.advance(job)
        self._ungate()
        validate_writes(self, self.workloads.values())  # each Workload write against its CRD and CEL rules

    def _bill(self) -> None:
        for cluster, spec in self.kube.ray_clusters.items():
            up = 0
            for group in spec["workerGroupSpecs"]:
                for replica in range(group["replicas"]):
                    hosts = [p for p in self.kube.pods.values() if p.metadata.labels["ray.io/cluster"] == cluster
                             and p.metadata.labels.get(REPLICA_INDEX_LABEL) == str(replica)]
                    if len(hosts) == group["numOfHosts"] and all(p.status.phase == "Running" for p in hosts):
                        up += 1
            self.slice_seconds += up * self.seconds_per_read
            self.peak_slices[cluster] = max(up, self.peak_slices.get(cluster, 0))

    def _ungate(self) -> None:
        """Kueue's ungater: an admitted elastic slice's pods may schedule, as many as it counts."""
        for workload in self.workloads.values():
            conditions = _conditions(workload)
            if not _is(conditions, "Admitted") or _is(conditions, "Finished") or _is(conditions, "Evicted"):
                continue
            cluster = ((self._job(workload).get("status") or {}).get("rayClusterName")) or ""
            if cluster in self.kube.ray_clusters:
                for pod_set in workload["spec"]["podSets"]:
                    group = "headgroup" if pod_set["name"] == kueue.HEAD_POD_SET else pod_set["name"]
                    self.kube.ungate(cluster, group, pod_set["count"])

    def _job(self, workload: dict) -> dict:
        return self.kube.ray_jobs[workload["metadata"]["ownerReferences"][0]["name"]]

    def _sync(self, workload: dict) -> None:
        conditions = _conditions(workload)
        if _is(conditions, "Finished"):
            return
        job = self._job(workload)
        if _is(conditions, "Evicted"):
            self._after_eviction(workload, job)
            return
        if workload["spec"]["active"] is False:
            return
        status = job.get("status") or {}
        if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
            succeeded = status.get("jobStatus") == "SUCCEEDED"
            self._set(workload, "Finished", True, "Succeeded" if succeeded else "Failed",
                      status.get("message") or ("Job finished successfully" if succeeded else "Job failed"))
            return
        if _is(conditions, "Admitted"):
            ready = (status.get("rayClusterStatus") or {}).get("state") == "ready"
            if ready and not _is(conditions, "PodsReady"):
                self._set(workload, "PodsReady", True, "Started", "All pods reached readiness and the workload is running")
            elif not ready and self._timed_out(conditions):
                self._evict(workload, job)
            elif ready:
                self._follow_growth(workload, job)

    def _follow_growth(self, workload: dict, job: dict) -> None:
        """An elastic run whose RayCluster Ray's autoscaler made larger: a new slice for the whole new size."""
        spec = self.kube.ray_clusters.get((job.get("status") or {}).get("rayClusterName") or "")
        if not _elastic(job) or spec is None or not spec.get("enableInTreeAutoscaling"):
            return
        live = {g["groupName"]: g["replicas"] * g["numOfHosts"] for g in spec["workerGroupSpecs"]}
        counted = {s["name"]: s["count"] for s in workload["spec"]["podSets"]}
        pending = [w for w in self.workloads.values() if (w["metadata"].get("annotations") or {}).get(REPLACEMENT_FOR)
                   == f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"]
        if not pending and any(counted.get(group, count) != count for group, count in live.items()):
            self.create_workload(job, counts=live, replaces=workload)

    def _timed_out(self, conditions: dict) -> bool:
        if _is(conditions, "PodsReady"):
            return False
        admitted = queue_status.parse_time(conditions["Admitted"]["lastTransitionTime"])
        return (self.now - admitted).total_seconds() >= self.wait.timeout_s

    def _evict(self, workload: dict, job: dict) -> None:
        requeue = workload["status"].setdefault("requeueState", {})
        count = requeue.get("count") or 0
        limit = self.wait.requeue_limit
        if limit is not None and count + 1 > limit:
            workload["spec"]["active"] = False
            message = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
            self._set(workload, "Evicted", True, "DeactivatedDueToRequeuingLimitExceeded", message)
            workload["status"].pop("requeueState", None)
            self._event("Workload", workload["metadata"]["name"], "Normal",
                        "EvictedDueToDeactivatedDueToRequeuingLimitExceeded", message)
        else:
            message = f"Exceeded the PodsReady timeout {workload['metadata']['namespace']}/{workload['metadata']['name']}"
            requeue["count"] = count + 1
            requeue["requeueAt"] = rfc3339(self.now + timedelta(seconds=self.wait.backoff_s(count + 1)))
            self._set(workload, "Evicted", True, kueue.EVICTED_BY_PODS_READY_TIMEOUT, message)
            self._event("Workload", workload["metadata"]["name"], "Normal", "EvictedDueToPodsReadyTimeout", message)
            self.evictions.append(workload["metadata"]["name"])
        job["spec"]["suspend"] = True
        self._event("RayJob", job["metadata"]["name"], "Normal", "Stopped", message)

    def _after_eviction(self, workload: dict, job: dict) -> None:
        """Release the quota once KubeRay has suspended the RayJob; end the backoff when it is due."""
        conditions = _conditions(workload)
        evicted = conditions["Evicted"]
        if _is(conditions, "QuotaReserved"):
            if (job.get("status") or {}).get("jobDeploymentStatus") != "Suspended":
                return
            workload["status"].pop("admission", None)
            self._set(workload, "Requeued", False, evicted["reason"], evicted["message"])
            self._set(workload, "QuotaReserved", False, "Pending", evicted["message"])
            self._set(workload, "Admitted", False, "NoReservation", "The workload has no reservation")
            self._set(workload, "PodsReady", False, "WaitForStart", "Not all pods are ready or succeeded")
            return
        requeue = workload["status"].get("requeueState") or {}
        if requeue.get("requeueAt") and queue_status.parse_time(requeue["requeueAt"]) <= self.now:
            requeue.pop("requeueAt")
            self._set(workload, "Requeued", True, "BackoffFinished", "The workload backoff was finished")

    # --- admission -------------------------------------------------------------------------------------------

    def _replaced(self, workload: dict) -> Optional[dict]:
        """The admitted slice a new elastic slice replaces, if it is one."""
        key = (workload["metadata"].get("annotations") or {}).get(REPLACEMENT_FOR)
        return self.workloads.get(key.split("/", 1)[1]) if key else None

    def _usage(self, workload: dict) -> dict:
        """What a Workload takes of the queue: its pod sets' counts of the RayJob's pods."""
        requests = {s.name: s.requests for s in kueue_quota.ray_job_pod_sets(self._job(workload))}
        return kueue_quota.usage(kueue_quota.PodSet(s["name"], s["count"], requests[s["name"]]) for s in workload["spec"]["podSets"])

    def _queue_order(self) -> list[dict]:
        def waiting(w: dict) -> bool:
            conditions = _conditions(w)
            backing_off = (w["status"].get("requeueState") or {}).get("requeueAt") is not None
            return (w["spec"]["active"] and not _is(conditions, "Finished") and not _is(conditions, "QuotaReserved")
                    and not backing_off)

        def queued_since(w: dict) -> str:
            evicted = _conditions(w).get("Evicted")
            if evicted and evicted["reason"] == kueue.EVICTED_BY_PODS_READY_TIMEOUT:
                return evicted["lastTransitionTime"]
            return w["metadata"]["creationTimestamp"]

        return sorted((w for w in self.workloads.values() if waiting(w)), key=queued_since)

    def _free(self) -> dict[str, Optional[Decimal]]:
        free = dict(self.quota)
        for workload in self.workloads.values():
            if _is(_conditions(workload), "QuotaReserved") and not _is(_conditions(workload), "Finished"):
                for resource, amount in self._usage(workload).items():
                    if free.get(resource) is not None:
                        free[resource] -= amount
        return free

    def _schedule(self) -> None:
        for workload in self._queue_order():
            free = self._free()
            replaced = self._replaced(workload)
            if replaced is not None:  # the old slice's quota is the new one's to take
                for resource, amount in self._usage(replaced).items():
                    if free.get(resource) is not None:
                        free[resource] += amount
            message = self._no_fit(workload, free)
            if message is None:
                self._admit(workload)
                continue
            self._set(workload, "QuotaReserved", False, "Pending", message)
            self._event("Workload", workload["metadata"]["name"], "Warning", "Pending", message)
            if self.cluster_queue["spec"].get("queueingStrategy") == kueue.STRICT_FIFO:
                return

    def _no_fit(self, workload: dict, free: dict) -> Optional[str]:
        """Kueue's message for the first pod set that does not fit (``flavorassigner.go``), or None."""
        asked: dict[str, Decimal] = {}
        requests = {s.name: s.requests for s in kueue_quota.ray_job_pod_sets(self._job(workload))}
        for pod_set in (kueue_quota.PodSet(s["name"], s["count"], requests[s["name"]]) for s in workload["spec"]["podSets"]):
            for resource, amount in pod_set.requests.items():
                if resource not in self.flavor_of:  # the stack's Kueue ignores what its queue does not cover
                    continue
                asked[resource] = asked.get(resource, Decimal(0)) + amount * pod_set.count
                most, left = self.quota.get(resource), free.get(resource)
                flavor = self.flavor_of.get(resource)
                if most is not None and asked[resource] > most:
                    return (f"couldn't assign flavors to pod set {pod_set.name}: insufficient quota for {resource} "
                            f"in flavor {flavor}, previously considered podsets requests "
                            f"({quantities.format_quantity(asked[resource] - amount * pod_set.count)}) + current podset "
                            f"request ({quantities.format_quantity(amount * pod_set.count)}) > maximum capacity "
                            f"({quantities.format_quantity(most)})")
                if left is not None and asked[resource] > left:
                    return (f"couldn't assign flavors to pod set {pod_set.name}: insufficient unused quota for "
                            f"{resource} in flavor {flavor}, {quantities.format_quantity(asked[resource] - left)} more needed")
        return None

    def _admit(self, workload: dict) -> None:
        queue = self.cluster_queue["metadata"]["name"]
        job = self._job(workload)
        assignments = []
        requests = {s.name: s.requests for s in kueue_quota.ray_job_pod_sets(job)}
        for pod_set in (kueue_quota.PodSet(s["name"], s["count"], requests[s["name"]]) for s in workload["spec"]["podSets"]):
            counted = {r: a for r, a in pod_set.requests.items() if r in self.flavor_of}
            assignment: dict = {"name": pod_set.name, "count": pod_set.count}
            if counted:
                assignment["flavors"] = {r: self.flavor_of[r] for r in counted}
                assignment["resourceUsage"] = {r: str(quantities.format_quantity(a * pod_set.count))
                                               for r, a in counted.items()}
            assignments.append(assignment)
        workload["status"]["admission"] = {"clusterQueue": queue, "podSetAssignments": assignments}
        evicted = _conditions(workload).get("Evicted")
        if evicted and evicted["status"] == "True":
            self._set(workload, "Evicted", False, "QuotaReserved", f"Previously: {evicted['message']}")
        self._set(workload, "QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {queue}")
        self._set(workload, "Admitted", True, "Admitted", "The workload is admitted")
        self._set(workload, "PodsReady", False, "WaitForStart", "Not all pods are ready or succeeded")
        name = workload["metadata"]["name"]
        waited = (self.now - queue_status.parse_time(workload["metadata"]["creationTimestamp"])).total_seconds()
        self._event("Workload", name, "Normal", "QuotaReserved",
                    f"Quota reserved in ClusterQueue {queue}, wait time since queued was {waited:.0f}s")
        self._event("Workload", name, "Normal", "Admitted",
                    f"Admitted by ClusterQueue {queue}, wait time since reservation was 0s")
        replaced = self._replaced(workload)
        if replaced is not None:  # a larger size of a running elastic run: its cluster is ready already
            self._set(replaced, "Finished", True, "WorkloadSliceReplaced", "Replaced to accommodate a new workload slice")
            self._set(workload, "PodsReady", True, "Started", "All pods reached readiness and the workload is running")
            return
        job["spec"]["suspend"] = False
        self._event("RayJob", job["metadata"]["name"], "Normal", "Started", f"Admitted by clusterQueue {queue}")

    # --- bookkeeping -----------------------------------------------------------------------------------------

    def _set(self, workload: dict, kind: str, status: bool, reason: str, message: str) -> None:
        conditions = workload["status"].setdefault("conditions", [])
        new = condition(kind, status, reason, message, self.now)
        for i, old in enumerate(conditions):
            if old["type"] == kind:
                if old["status"] == new["status"]:  # metav1 keeps the time of the last status change
                    new["lastTransitionTime"] = old["lastTransitionTime"]
                conditions[i] = new
                return
        conditions.append(new)

    def _event(self, kind: str, name: str, type_: str, reason: str, message: str) -> None:
        self.events.append(k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(name=f"{name}.{len(self.events)}"), reason=reason, message=message, count=1,
            type=type_, involved_object=k8s.V1ObjectReference(kind=kind, name=name),
            last_timestamp=rfc3339(self.now),
        ))

    def workload_of(self, job_name: str) -> dict:
        """The Workload of a RayJob (every fake run has one)."""
        return next(w for w in self.workloads.values() if w["metadata"]["ownerReferences"][0]["name"] == job_name)

    def events_of(self, kind: str, name: str) -> list[dict]:
        """The events about one object, as mappings (what ``queue_status.workload_line`` reads)."""
        return [{"reason": e.reason, "message": e.message, "type": e.type, "lastTimestamp": e.last_timestamp}
                for e in self.events if e.involved_object.kind == kind and e.involved_object.name == name]


def _conditions(workload: dict) -> dict:
    return {c["type"]: c for c in workload["status"].get("conditions") or []}


def _elastic(job: dict) -> bool:
    return (job["metadata"].get("annotations") or {}).get(kueue.ELASTIC_JOB_ANNOTATION) == "true"


def _is(conditions: dict, kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


class _KueueCustom:
    """CustomObjectsApi: RayJobs through Kueue to the fake KubeRay, Workloads from the fake Kueue."""

    def __init__(self, queue: FakeKueue):
        self.queue = queue

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        labels = (body.get("metadata") or {}).get("labels") or {}
        queued = labels.get(kueue.QUEUE_LABEL) == self.queue.queue_name
        self.queue.received.append(copy.deepcopy(body))
        if queued:
            body = self.queue.admit_to_queue(body)
        created = self.queue.kube.custom.create_namespaced_custom_object(group, version, namespace, plural, body)
        if queued:
            self.queue.create_workload(self.queue.kube.ray_jobs[body["metadata"]["name"]])
        return created

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.queue.tick()  # KubeRay and Kueue both act on every object, the one read among them
        if group == "kueue.x-k8s.io":
            assert (version, plural) == ("v1beta2", "workloads")
            if name not in self.queue.workloads:
                raise k8s.ApiException(status=404, reason="Not Found")
            return self.queue.workloads[name]
        assert (group, version, plural) == ("ray.io", "v1", "rayjobs")
        if name not in self.queue.kube.ray_jobs:
            raise k8s.ApiException(status=404, reason="Not Found")
        self.queue.kube.reads += 1
        return self.queue.kube.ray_jobs[name]

    def get_cluster_custom_object(self, group, version, plural, name):
        assert (group, version, plural) == ("kueue.x-k8s.io", "v1beta2", "clusterqueues")
        if name != self.queue.cluster_queue["metadata"]["name"]:
            raise k8s.ApiException(status=404, reason="Not Found")
        return self.queue.cluster_queue

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=None):
        if group != "kueue.x-k8s.io":
            return self.queue.kube.custom.list_namespaced_custom_object(group, version, namespace, plural)
        assert (version, plural) == ("v1beta2", "workloads")
        wanted = dict(item.split("=") for item in label_selector.split(",")) if label_selector else {}
        return {"items": [w for w in self.queue.workloads.values()
                          if wanted.items() <= w["metadata"]["labels"].items()]}


class _KueueCore:
    """CoreV1Api of the fake KubeRay, with Kueue's events among the events."""

    def __init__(self, queue: FakeKueue):
        self.queue = queue
        self.api_client = None

    def __getattr__(self, name):
        return getattr(self.queue.kube.core, name)

    def list_namespaced_event(self, namespace):
        return k8s.CoreV1EventList(items=[*self.queue.kube.events, *self.queue.events])
