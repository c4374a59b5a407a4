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

* Admission (``pkg/scheduler/scheduler.go``): the queue is walked in order (creation time, or the eviction time
  of a requeued run); each Workload's pod sets are given flavors pod set by pod set as Kueue's flavor assigner
  gives them (:class:`FakeScheduler`, ``core.kueue_admission``: ``assignFlavors``, ``findFlavorForPodSets``,
  ``fitsResourceQuota``, ``resolvePodSetFlavors``), against the quota the admitted Workloads use
  (``totalRequestsFromAdmission``). A Workload that fits is admitted (``QuotaReserved``, ``Admitted``, its flavors'
  node labels and tolerations merged into the RayJob's pod templates, ``RunWithPodSetsInfo``, and the RayJob
  unsuspended); one that does not gets Kueue's pending message (reason ``Pending``: the
  UnadmittedWorkloadsObservability gate is off in 0.19.2) and under StrictFIFO holds back every run behind it.
  An assignment cut short by a pod set that takes no flavor (``atLeastOnePodsAssignmentFailed``) with no reason
  to give (``IgnoreUndeclared``) reads Fit: Kueue writes it, the Workload CRD's CEL rule refuses the write
  (``podSetAssignments must have the same number of podSets as the spec``, evaluated by tests/crd_rules.py;
  :attr:`FakeKueue.refused`), and the Workload goes back to the head of the queue (``requeueAndUpdate`` after a failed ``admit``), holding back
  every run behind it whatever the queueing strategy.

Conditions, reasons and messages are Kueue's (``apis/kueue/v1beta2/workload_types.go``, ``pkg/scheduler``,
``pkg/workload``). Not modelled: admission checks (queued provisioning), preemption (nothing is ever preempted,
as under the stack's ClusterQueue, whose policies are Kueue's default Never), the other ClusterQueues of a cohort,
priorities.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from datetime import datetime, timedelta, timezone
from typing import Optional

import jsonschema
from kubernetes import client as k8s

from gke_ray_tpu.core import kueue, kueue_admission, kueue_quota, kueue_waiting
from gke_ray_tpu.core.kuberay import ray_job_problems
from gke_ray_tpu.training.driver import queue_status
from tests.fakes import REPLICA_INDEX_LABEL, FakeKubeRay
from tests.schemas import validate_kueue, validate_writes

REPLACEMENT_FOR = "kueue.x-k8s.io/workload-slice-replacement-for"
"""The annotation on a new Workload slice naming the slice it replaces (``pkg/workloadslicing``)."""

START = datetime(2026, 12, 4, 6, 0, 0, tzinfo=timezone.utc)


class FakeScheduler:
    """Kueue's scheduler's flavor assignment over one ClusterQueue and its ResourceFlavors
    (``flavorassigner.New(...).Assign``), with the Kueue's ``quotaCheckStrategy``: nothing is preempted
    (``oracle``, by default :func:`~gke_ray_tpu.core.kueue_admission.no_candidates`), and a cohort's other
    ClusterQueues are ``neighbours`` (each a manifest and its usage). Kueue's own test cases drive it
    (tests/test_kueue_upstream.py)."""

    def __init__(self, cluster_queue: dict, flavors: list[dict], strategy: str, *,
                 oracle: kueue_admission.Oracle = kueue_admission.no_candidates,
                 neighbours: tuple = (), fair_sharing: bool = False):
        self.cluster_queue, self.strategy, self.oracle = cluster_queue, strategy, oracle
        self.flavors = {f["metadata"]["name"]: f for f in flavors}
        self.neighbours, self.fair_sharing = neighbours, fair_sharing

    def assign(self, pod_sets: list[kueue_quota.PodSet], used: dict[tuple[str, str], int],
               groups: Optional[list[Optional[str]]] = None) -> kueue_admission.Assignment:
        queue = kueue_admission.QueueSnapshot(self.cluster_queue, used, neighbours=self.neighbours,
                                              fair_sharing=self.fair_sharing)
        return kueue_admission.FlavorAssigner(queue, self.flavors, self.strategy, self.oracle).assign(pod_sets, groups)


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
    """Kueue over ``kube`` for one ClusterQueue, its LocalQueue and ResourceFlavors (manifests as
    ``components.queue_manifests`` builds them); ``strategy``: its ``quotaCheckStrategy``.

    ``core`` and ``custom`` stand in for the Kubernetes APIs the submit command uses: RayJobs go through Kueue
    to KubeRay, Workloads are Kueue's, and the events are both's.
    """

    def __init__(self, kube: FakeKubeRay, cluster_queue: dict, local_queue: dict, flavors: list[dict], *,
                 strategy: str = kueue.IGNORE_UNDECLARED, claim_templates: Optional[dict[str, dict]] = None,
                 wait: kueue_waiting.WaitSettings = kueue_waiting.WaitSettings(), seconds_per_read: int = 60,
                 namespace_labels: Optional[dict[str, dict]] = None, neighbours: tuple = ()):
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
        self.scheduler = FakeScheduler(cluster_queue, flavors, strategy, neighbours=neighbours)
        self.claim_templates = claim_templates
        """The ResourceClaimTemplates by name, where this Kueue counts DRA claims (a cluster's own); None: it does not."""
        self.namespace_labels = namespace_labels or {}
        self.refused: list[str] = []
        """Status writes the API server refused, each with the CRD rule's message."""
        self.core = _KueueCore(self)
        self.custom = _KueueCustom(self)

    @classmethod
    def of(cls, kube: FakeKubeRay, objects, **settings) -> "FakeKueue":
        """The fake Kueue of a stack's queue (``components.tpu_queue.QueueObjects``): its ClusterQueue, LocalQueue,
        ResourceFlavors, that Kueue's quotaCheckStrategy and the claims it counts."""
        return cls(kube, objects.cluster_queue, objects.local_queue, objects.flavors, strategy=objects.strategy,
                   claim_templates=objects.claim_templates, **settings)

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
        pod_sets = [{**s, "count": (counts or {}).get(s["name"], s["count"])}
                    for s in copy.deepcopy(kueue_quota.kueue_pod_sets(job))]
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
            job = self._job(workload)
            if not _is(conditions, "Admitted") or _is(conditions, "Finished") or _is(conditions, "Evicted") or job is None:
                continue
            cluster = ((job.get("status") or {}).get("rayClusterName")) or ""
            if cluster in self.kube.ray_clusters:
                for pod_set in workload["spec"]["podSets"]:
                    group = "headgroup" if pod_set["name"] == kueue.HEAD_POD_SET else pod_set["name"]
                    self.kube.ungate(cluster, group, pod_set["count"])

    def _job(self, workload: dict) -> Optional[dict]:
        """The RayJob that owns a Workload (None: a Workload made on its own, as Kueue's own tests make them)."""
        owners = workload["metadata"].get("ownerReferences") or []
        return self.kube.ray_jobs[owners[0]["name"]] if owners else None

    def _sync(self, workload: dict) -> None:
        conditions = _conditions(workload)
        job = self._job(workload)
        if _is(conditions, "Finished") or job is None:
            return
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

    def pod_sets(self, workload: dict) -> list[kueue_quota.PodSet]:
        """The Workload's pod sets with what each pod asks, as Kueue reads them from the Workload's templates
        (``totalRequestsFromPodSets``), the claimed NICs where this Kueue counts DRA claims."""
        return [kueue_quota.pod_set(s, self.claim_templates) for s in workload["spec"]["podSets"]]

    def add_workload(self, workload: dict) -> dict:
        """A Workload made on its own (no job), as Kueue's tests make them: queued from now."""
        workload = copy.deepcopy(workload)
        workload["metadata"].setdefault("creationTimestamp", rfc3339(self.now))
        workload["metadata"].setdefault("ownerReferences", [])
        workload["spec"].setdefault("active", True)
        workload.setdefault("status", {})
        self.workloads[workload["metadata"]["name"]] = workload
        return workload

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

    def used(self, leaving_out: Optional[dict] = None) -> dict[tuple[str, str], int]:
        """What the Workloads holding quota take of the ClusterQueue, but ``leaving_out`` (the admitted slice an
        elastic run's new slice replaces: its quota is the new one's, ``findFlavorForPodSets`` counting only the
        difference)."""
        return kueue_admission.used_by(
            w["status"]["admission"] for w in self.workloads.values()
            if w is not leaving_out and _is(_conditions(w), "QuotaReserved") and not _is(_conditions(w), "Finished"))

    def _schedule(self) -> None:
        for workload in self._queue_order():
            refusal = self._misconfigured(workload)
            if refusal is not None:  # ValidateAdmissibility: the Workload is inadmissible, the queue moves on
                self._set(workload, "QuotaReserved", False, "Pending", refusal)
                continue
            assignment = self.scheduler.assign(self.pod_sets(workload), self.used(self._replaced(workload)))
            if assignment.mode == kueue_admission.FIT:
                reserved = self._reserve(workload, assignment)
                try:  # Kueue's status write, which the API server takes or refuses by the Workload CRD's rules
                    validate_kueue(reserved, old=workload)
                except jsonschema.ValidationError as refused:
                    # admit() failed: the Workload, requeued after nomination, heads the queue again next cycle
                    self.refused.append(f"Workload {workload['metadata']['name']}: {refused.message}")
                    return
                self.workloads[workload["metadata"]["name"]] = reserved
                self._admitted(reserved, assignment)
                continue
            message = assignment.message()
            self._set(workload, "QuotaReserved", False, "Pending", message)
            self._event("Workload", workload["metadata"]["name"], "Warning", "Pending", message)
            if self.cluster_queue["spec"].get("queueingStrategy", kueue.BEST_EFFORT_FIFO) == kueue.STRICT_FIFO:
                return

    def _misconfigured(self, workload: dict) -> Optional[str]:
        """``ValidateAdmissibility``: the Workload's namespace against the ClusterQueue's ``namespaceSelector`` (a
        null one matches none), then its containers' requests against their limits (``ValidateResources``)."""
        selector = self.cluster_queue["spec"].get("namespaceSelector")
        namespace = workload["metadata"]["namespace"]
        labels = {"kubernetes.io/metadata.name": namespace, **self.namespace_labels.get(namespace, {})}
        matched = selector is not None and all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and all(
            kueue_admission.label_requirement_matches(e, labels) for e in selector.get("matchExpressions") or [])
        if not matched:
            return "workload namespace doesn't match ClusterQueue selector"
        invalid = kueue_admission.requests_over_limits(workload["spec"]["podSets"])
        return f"resources validation failed: {invalid}" if invalid else None

    def _reserve(self, workload: dict, assignment: kueue_admission.Assignment) -> dict:
        """The Workload as Kueue writes it when it admits it (``prepareWorkload``: the admission, ``QuotaReserved``
        and, with no admission checks, ``Admitted``), a copy: the write may be refused."""
        queue = self.cluster_queue["metadata"]["name"]
        workload = copy.deepcopy(workload)
        workload["status"]["admission"] = {"clusterQueue": queue,
                                           "podSetAssignments": [one.to_api() for one in assignment.pod_sets]}
        evicted = _conditions(workload).get("Evicted")
        if evicted and evicted["status"] == "True":
            self._set(workload, "Evicted", False, "QuotaReserved", f"Previously: {evicted['message']}")
        self._set(workload, "QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {queue}")
        self._set(workload, "Admitted", True, "Admitted", "The workload is admitted")
        self._set(workload, "PodsReady", False, "WaitForStart", "Not all pods are ready or succeeded")
        return workload

    def _admitted(self, workload: dict, assignment: kueue_admission.Assignment) -> None:
        """What follows an admission written: Kueue's events, and the run started (or an elastic run's old slice
        finished)."""
        queue = self.cluster_queue["metadata"]["name"]
        job = self._job(workload)
        assignments = workload["status"]["admission"]["podSetAssignments"]
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
        if job is None:
            return
        self._run_with_flavors(job, assignments)
        job["spec"]["suspend"] = False
        self._event("RayJob", job["metadata"]["name"], "Normal", "Started", f"Admitted by clusterQueue {queue}")

    def _run_with_flavors(self, job: dict, assignments: list[dict]) -> None:
        """``RunWithPodSetsInfo``: each pod template gets its flavors' node labels (a conflicting one is an error,
        ``podset.Merge``) and tolerations (``podset.FromAssignment``)."""
        cluster = job["spec"]["rayClusterSpec"]
        templates = {kueue.HEAD_POD_SET: cluster["headGroupSpec"]["template"],
                     **{g["groupName"]: g["template"] for g in cluster.get("workerGroupSpecs") or []}}
        for one in assignments:
            pod = templates[one["name"]].setdefault("spec", {})
            for name in sorted(set(one["flavors"].values())):
                flavor = self.scheduler.flavors[name].get("spec") or {}
                selector = pod.setdefault("nodeSelector", {})
                for key, value in (flavor.get("nodeLabels") or {}).items():
                    assert selector.get(key, value) == value, f"conflicting nodeSelector {key} in pod set {one['name']}"
                    selector[key] = value
                for toleration in flavor.get("tolerations") or []:
                    if toleration not in pod.setdefault("tolerations", []):
                        pod["tolerations"].append(dict(toleration))

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
        assert (group, version) == ("kueue.x-k8s.io", "v1beta2") and plural in ("clusterqueues", "resourceflavors")
        found = ({self.queue.cluster_queue["metadata"]["name"]: self.queue.cluster_queue} if plural == "clusterqueues"
                 else self.queue.scheduler.flavors)
        if name not in found:
            raise k8s.ApiException(status=404, reason="Not Found")
        return found[name]

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
