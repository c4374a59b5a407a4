"""What a run asks of a Kueue queue and what a queue can ever give it (Kueue v0.19.2).

* A RayJob's pod sets (``pkg/controller/jobs/raycluster/common.go`` ``BuildPodSets``,
  ``pkg/controller/jobs/rayjob/rayjob_controller.go`` ``PodSets``): the head (1 pod, plus Ray's autoscaler
  sidecar when in-tree autoscaling is on, plus the submitter container in SidecarMode), one per worker group
  of ``replicas x numOfHosts`` pods, and a submitter pod set in K8sJobMode.
* The Kueue the stack installs counts the chips only (``resources.quotaCheckStrategy: IgnoreUndeclared``, a
  Beta feature on by default in 0.19): its ClusterQueue covers ``google.com/tpu``, not cpu and memory. Chips
  are what the queue is for; the CPU head runs on the stack's CPU pool; and with cpu covered, Kueue would as
  often name cpu as the chips when it says why a run waits (it walks a pod set's resources in map order,
  ``pkg/resources/requests.go``). It runs with its DRA accounting off (``components.kueue_config.FEATURE_GATES``):
  the DCN NICs a TPU worker claims are its host's own, so the chips already bound them, and with the accounting
  on Kueue leaves a run inadmissible unless every claimed device class is mapped to a resource, and always for
  Autopilot's claim of every NIC (``allocationMode: All``, ``pkg/dra/claims.go``). A Kueue installed by someone
  else checks every resource a pod requests unless told otherwise (``BlockUndeclared``) and counts DRA claims
  (``KueueDRAIntegration``, on by default since 0.18), so a queue there covers cpu, memory and the NICs
  (as :data:`~gke_ray_tpu.core.kueue.DCN_NIC`: that Kueue must map ``netdev.google.com`` to it) as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Iterable, Mapping, Optional, Sequence

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kueue import DCN_NIC, HEAD_POD_SET, NETDEV_DEVICE_CLASS, TPU
from gke_ray_tpu.core.quantities import format_quantity, quantity

AUTOSCALER_REQUESTS = {"cpu": "500m", "memory": "512Mi"}
"""What Kueue counts for Ray's autoscaler sidecar when the spec sets none (``defaultAutoscalerResources``)."""
SUBMITTER_REQUESTS = {"cpu": "500m", "memory": "200Mi"}
"""What Kueue counts for KubeRay's default submitter (``defaultSubmitterResources``)."""


@dataclass(frozen=True)
class PodSet:
    """One of the pod sets Kueue makes of a RayJob: ``count`` pods of ``requests`` each."""

    name: str
    count: int
    requests: Mapping[str, Decimal]


def pod_requests(pod: Mapping, extra_containers: Sequence[Mapping] = ()) -> dict[str, Decimal]:
    """What one pod of a template requests: its containers' requests summed (a limit stands in for a missing
    request, as the API server defaults it), at least any one init container's."""
    total: dict[str, Decimal] = {}
    for container in [*(pod.get("containers") or []), *extra_containers]:
        for resource, amount in _container_requests(container).items():
            total[resource] = total.get(resource, Decimal(0)) + amount
    for init in pod.get("initContainers") or []:
        for resource, amount in _container_requests(init).items():
            total[resource] = max(total.get(resource, Decimal(0)), amount)
    return total


def _container_requests(container: Mapping) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {resource: quantity(amount) for resource, amount in merged.items()}


def _claimed_nics(pod: Mapping, claim_templates: Mapping[str, Mapping]) -> dict[str, Decimal]:
    """The DCN NICs a pod claims through its ResourceClaimTemplates (Kueue counts a mapped device class)."""
    nics = Decimal(0)
    for claim in pod.get("resourceClaims") or []:
        template = claim_templates.get(claim.get("resourceClaimTemplateName") or "") or {}
        for request in (((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly") or {}
            if exactly.get("deviceClassName") == NETDEV_DEVICE_CLASS:
                nics += Decimal(exactly.get("count", 1))
    return {DCN_NIC: nics} if nics else {}


def ray_job_pod_sets(ray_job: Mapping, claim_templates: Optional[Mapping[str, Mapping]] = None, *,
                     grown: bool = False) -> list[PodSet]:
    """The pod sets Kueue builds for a RayJob that brings its cluster, with each pod's requests.

    As ``BuildPodSets`` and ``RayJob.PodSets``: the head (1), plus the autoscaler sidecar with in-tree
    autoscaling and the submitter container in SidecarMode; each worker group as ``replicas`` (default 1) x
    ``numOfHosts``; a submitter pod set in K8sJobMode. ``claim_templates`` (by name) adds the DCN NICs the
    pods claim. ``grown``: an elastic run once its cluster has grown to each group's ``maxReplicas`` (what Kueue
    counts for its last Workload slice). Not modelled: GCS fault tolerance's Redis cleanup (the stack never
    turns it on)."""
    spec = ray_job.get("spec") or {}
    cluster = spec.get("rayClusterSpec") or {}
    mode = spec.get("submissionMode") or "K8sJobMode"
    templates = claim_templates or {}
    head_pod = ((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    sidecars = []
    if cluster.get("enableInTreeAutoscaling"):
        sidecars.append({"resources": (cluster.get("autoscalerOptions") or {}).get("resources")
                         or {"requests": AUTOSCALER_REQUESTS}})
    if mode == "SidecarMode":
        sidecars.append({"resources": {"requests": SUBMITTER_REQUESTS}})
    sets = [PodSet(HEAD_POD_SET, 1, {**pod_requests(head_pod, sidecars), **_claimed_nics(head_pod, templates)})]
    for group in cluster.get("workerGroupSpecs") or []:
        pod = (group.get("template") or {}).get("spec") or {}
        replicas = group.get("maxReplicas", group.get("replicas", 1)) if grown else group.get("replicas", 1)
        count = int(replicas) * max(int(group.get("numOfHosts", 1)), 1)
        sets.append(PodSet(group["groupName"], count, {**pod_requests(pod), **_claimed_nics(pod, templates)}))
    if mode == "K8sJobMode":
        submitter = ((spec.get("submitterPodTemplate") or {}).get("spec")
                     or {"containers": [{"resources": {"requests": SUBMITTER_REQUESTS}}]})
        sets.append(PodSet("submitter", 1, pod_requests(submitter)))
    return sets


def usage(pod_sets: Iterable[PodSet]) -> dict[str, Decimal]:
    """What the pod sets take of a queue's quota, per resource."""
    total: dict[str, Decimal] = {}
    for pod_set in pod_sets:
        for resource, amount in pod_set.requests.items():
            total[resource] = total.get(resource, Decimal(0)) + amount * pod_set.count
    return total


def queue_quota(ray_cluster_spec: Mapping, slices: int, submission_mode: str, *, count_host: bool = False,
                claim_templates: Optional[Mapping[str, Mapping]] = None) -> dict[str, Decimal]:
    """The quota of a stack's queue: what its ``slices`` of TPU workers ask (the chips, and the DCN NICs they
    claim). ``count_host`` (a Kueue that checks every resource) adds cpu and memory: every slice's workers, and a
    head for as many runs as there are slices (a run holds at least one), so only the chips hold a run back."""
    groups = [{**group, "replicas": slices} for group in ray_cluster_spec.get("workerGroupSpecs") or []]
    job = {"spec": {"submissionMode": submission_mode, "rayClusterSpec": {**ray_cluster_spec, "workerGroupSpecs": groups}}}
    sets = ray_job_pod_sets(job, claim_templates)
    total = usage(PodSet(s.name, s.count * slices, s.requests) if s.name in (HEAD_POD_SET, "submitter") else s
                  for s in sets)
    kept = (TPU, DCN_NIC, "cpu", "memory") if count_host else (TPU, DCN_NIC)
    return {resource: amount for resource, amount in total.items() if resource in kept and amount}


# --- What Kueue cannot count --------------------------------------------------------------------------------

def claim_problems(claim_template: Mapping) -> list[str]:
    """What Kueue's DRA accounting refuses in a ResourceClaimTemplate a run's pods use (``pkg/dra/claims.go``):
    ``allocationMode: All`` (Autopilot's DRANET claim) leaves the Workload inadmissible."""
    requests = (((claim_template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []
    return [f"device request {r.get('name')!r} asks for all devices (allocationMode All), which Kueue cannot count"
            for r in requests if (r.get("exactly") or {}).get("allocationMode") == "All"]


# --- Can a run ever be admitted? -------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueueCapacity:
    """The most of each resource a ClusterQueue can ever give one run: its nominal quota plus what it may borrow
    (None: unbounded, a cohort without a borrowing limit)."""

    cluster_queue: str
    most: Mapping[str, Optional[Decimal]]


def queue_capacity(cluster_queue_manifest: Mapping) -> QueueCapacity:
    """Read from a ClusterQueue (as declared, or as the API server returns it)."""
    spec = cluster_queue_manifest.get("spec") or {}
    in_cohort = bool(spec.get("cohortName"))
    most: dict[str, Optional[Decimal]] = {}
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for entry in flavor.get("resources") or []:
                name, known = entry["name"], most.get(entry["name"], Decimal(0))
                borrow = entry.get("borrowingLimit")
                if known is None or (in_cohort and borrow is None):
                    most[name] = None
                else:
                    most[name] = known + quantity(entry["nominalQuota"]) + (quantity(borrow) if in_cohort else 0)
    return QueueCapacity(cluster_queue_manifest["metadata"]["name"], most)


def check_admissible(asked: Mapping[str, Decimal], capacity: QueueCapacity, key: str, value: object, *,
                     ignore_undeclared: bool = True) -> None:
    """Refuse, naming ``key`` (the setting that sizes the run), a run that asks more of a resource than the
    queue could ever give it: Kueue would keep it pending for ever (``ExceedsMaxQuota``). With
    ``ignore_undeclared`` false (a Kueue that checks every resource), a resource the queue does not cover is
    refused too: Kueue could never admit it."""
    for resource, amount in sorted(asked.items()):
        if not amount or (ignore_undeclared and resource not in capacity.most):
            continue
        if resource not in capacity.most:
            raise ConfigError(key, value, f"a run whose pods ask only for what ClusterQueue {capacity.cluster_queue} "
                                          f"covers ({', '.join(sorted(capacity.most))}); they ask for {resource}")
        most = capacity.most[resource]
        if most is not None and amount > most:
            raise ConfigError(key, value, f"a run ClusterQueue {capacity.cluster_queue} can ever admit: it asks for "
                                          f"{format_quantity(amount)} {resource}, the queue has at most "
                                          f"{format_quantity(most)} (its quota and what it may borrow)")
