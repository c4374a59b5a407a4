"""What a run asks of a Kueue queue (Kueue v0.19.2): a RayJob's pod sets, what each pod counts for, and the
quota of a stack's queue.

* A RayJob's pod sets (``pkg/controller/jobs/raycluster/common.go`` ``BuildPodSets``,
  ``pkg/controller/jobs/rayjob/rayjob_controller.go`` ``PodSets``): the head, one per worker group, and a
  submitter in K8sJobMode (:func:`kueue_pod_sets`).
* Every pod set that asks for something must take a flavor for at least one of its resources, or Kueue admits
  none of the run (``flavorassigner.assignFlavors``, held in ``core.kueue_admission``). So a stack's queue covers
  what every pod set asks: the workers' chips, and cpu and memory of heads and workers alike
  (:data:`QUEUED_RESOURCES`). The Kueue the stack installs skips what its queue does not cover
  (``quotaCheckStrategy: IgnoreUndeclared``) and leaves DRA claims uncounted; a Kueue installed by someone else
  checks every resource (``BlockUndeclared``, its default) and counts DRA claims (``KueueDRAIntegration``, on by
  default since 0.18), so a queue there covers the workers' DCN NICs too (as
  :data:`~gke_ray_tpu.core.kueue.DCN_NIC`: that Kueue must map ``netdev.google.com`` to it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Iterable, Mapping, Optional

from gke_ray_tpu.core.kueue import DCN_NIC, HEAD_POD_SET, NETDEV_DEVICE_CLASS, TPU
from gke_ray_tpu.core.quantities import quantity

AUTOSCALER_REQUESTS = {"cpu": "500m", "memory": "512Mi"}
"""KubeRay's resources for Ray's autoscaler sidecar when the spec sets none, requests and limits alike; Kueue
counts the same (``raycluster/common.go`` ``defaultAutoscalerResources``)."""
SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
"""KubeRay's default submitter container's resources, which Kueue counts (``rayjob_controller.go``
``defaultSubmitterResources``)."""
REDIS_CLEANUP_REQUESTS = {"cpu": "200m", "memory": "256Mi"}
"""What Kueue adds to the head's Ray container, at least, under GCS fault tolerance (``redisCleanupResourceRequests``)."""
FT_ENABLED_ANNOTATION = "ray.io/ft-enabled"
SUBMITTER_POD_SET = "submitter"


@dataclass(frozen=True)
class PodSet:
    """One of a Workload's pod sets: ``count`` pods of ``template``, each asking ``requests`` as Kueue counts
    them (:func:`pod_requests`, plus the devices it claims where Kueue counts claims)."""

    name: str
    count: int
    requests: Mapping[str, Decimal]
    template: Mapping = field(default_factory=dict, compare=False)
    """The pod template (``metadata``, ``spec``) Kueue keeps in the Workload: its node selector, affinity and
    tolerations decide which flavors the pod set may take (``checkFlavorForPodSets``)."""

    @property
    def pod(self) -> Mapping:
        return self.template.get("spec") or {}

    def with_count(self, count: int) -> "PodSet":
        return PodSet(self.name, count, self.requests, self.template)


def pod_requests(pod: Mapping) -> dict[str, Decimal]:
    """What one pod asks of a queue, as Kueue counts it (``workload.totalRequestsFromPodSets``):
    ``UseLimitsAsMissingRequestsInPod`` (a limit stands in for a missing request), then Kubernetes'
    ``resourcehelpers.PodRequests``: the containers summed; each init container added to the restartable
    (sidecar) init containers before it, a sidecar also added to the sum; the larger of the sum and the largest
    of those per resource; plus the pod's ``overhead``."""
    total: dict[str, Decimal] = {}
    for container in pod.get("containers") or []:
        _add(total, _container_requests(container))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for init in pod.get("initContainers") or []:
        asked = _container_requests(init)
        if init.get("restartPolicy") == "Always":
            _add(total, asked)
            _add(sidecars, asked)
            asked = dict(sidecars)
        else:
            asked = _add(dict(asked), sidecars)
        for resource, amount in asked.items():
            init_peak[resource] = max(init_peak.get(resource, amount), amount)
    for resource, amount in init_peak.items():
        total[resource] = max(total.get(resource, amount), amount)
    _add(total, {resource: quantity(amount) for resource, amount in (pod.get("overhead") or {}).items()})
    return total


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> dict[str, Decimal]:
    for resource, amount in more.items():
        total[resource] = total.get(resource, Decimal(0)) + amount
    return total


def _container_requests(container: Mapping) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {resource: quantity(amount) for resource, amount in merged.items()}


def claimed_devices(pod: Mapping, claim_templates: Mapping[str, Mapping],
                    device_classes: Mapping[str, str]) -> dict[str, Decimal]:
    """The devices a pod claims through its ResourceClaimTemplates, as the resources ``device_classes`` maps
    their classes to (a Kueue that counts claims: ``dra.GetResourceRequestsForResourceClaimTemplates``, an
    ``ExactCount`` request counting its ``count``); a class the map lacks is left out here, and
    :func:`claim_problems` says why Kueue would refuse it."""
    counted: dict[str, Decimal] = {}
    for claim in pod.get("resourceClaims") or []:
        template = claim_templates.get(claim.get("resourceClaimTemplateName") or "") or {}
        for request in (((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly") or {}
            resource = device_classes.get(exactly.get("deviceClassName") or "")
            if resource and exactly.get("allocationMode", "ExactCount") == "ExactCount":
                _add(counted, {resource: Decimal(exactly.get("count", 1))})
    return counted


def kueue_pod_sets(ray_job: Mapping, *, grown: bool = False) -> list[dict]:
    """The pod sets of a RayJob's Workload, as Kueue builds them (``raycluster.BuildPodSets``,
    ``RayJob.PodSets``): the head (1 pod; under GCS fault tolerance its Ray container asks at least the Redis
    cleanup's requests; with in-tree autoscaling Ray's autoscaler sidecar is added, with
    ``autoscalerOptions.resources`` or KubeRay's defaults; in SidecarMode the submitter container), each worker
    group of ``replicas`` (default 1) x ``numOfHosts`` pods, and in K8sJobMode (the RayJob CRD's default) a submitter pod set
    (``submitterPodTemplate``, or KubeRay's default submitter). ``grown``: an elastic run once Ray's autoscaler
    has raised each group to its ``maxReplicas`` (what Kueue counts for its last Workload slice,
    ``raycluster.UpdatePodSets``). Each: ``{"name", "count", "template"}``, the template the RayJob's own where
    Kueue adds nothing to it (a caller that changes one copies it first)."""
    spec = ray_job.get("spec") or {}
    cluster = spec.get("rayClusterSpec") or {}
    mode = spec.get("submissionMode", "K8sJobMode")  # missing: the CRD's default; "": Go's zero value, no submitter
    head = (cluster.get("headGroupSpec") or {}).get("template") or {}
    containers = list((head.get("spec") or {}).get("containers") or [])
    annotations = (ray_job.get("metadata") or {}).get("annotations") or {}
    if cluster.get("gcsFaultToleranceOptions") is not None or annotations.get(FT_ENABLED_ANNOTATION) == "true":
        if not containers:
            raise ValueError("cannot account for Redis cleanup resources: head pod template must include the Ray "
                             "container")
        resources = containers[0].get("resources") or {}
        requests = dict(resources.get("requests") or {})
        for resource, amount in REDIS_CLEANUP_REQUESTS.items():
            if resource not in requests or quantity(requests[resource]) < quantity(amount):
                requests[resource] = amount
        containers[0] = {**containers[0], "resources": {**resources, "requests": requests}}
    if cluster.get("enableInTreeAutoscaling"):
        options = cluster.get("autoscalerOptions") or {}
        resources = options.get("resources") if options.get("resources") is not None else {
            "requests": dict(AUTOSCALER_REQUESTS), "limits": dict(AUTOSCALER_REQUESTS)}
        containers.append({"name": "autoscaler", "resources": resources})
    if mode == "SidecarMode":
        containers.append({"name": "ray-job-submitter", "resources": SUBMITTER_RESOURCES})
    if containers != list((head.get("spec") or {}).get("containers") or []):
        head = {**head, "spec": {**(head.get("spec") or {}), "containers": containers}}
    sets = [{"name": HEAD_POD_SET, "count": 1, "template": head}]
    for group in cluster.get("workerGroupSpecs") or []:
        replicas = group.get("maxReplicas", group.get("replicas")) if grown else group.get("replicas")
        hosts = int(group.get("numOfHosts", 1))
        count = (1 if replicas is None else int(replicas)) * (hosts if hosts > 1 else 1)
        sets.append({"name": group["groupName"], "count": count, "template": group.get("template") or {}})
    if mode == "K8sJobMode":
        submitter = spec.get("submitterPodTemplate")
        if submitter is None:
            image = (containers[0] if containers else {}).get("image")
            submitter = {"spec": {"containers": [{"name": "ray-job-submitter", **({"image": image} if image else {}),
                                                  "resources": SUBMITTER_RESOURCES}],
                                  "restartPolicy": "Never"}}
        sets.append({"name": SUBMITTER_POD_SET, "count": 1, "template": submitter})
    return sets


def pod_set(kueue_pod_set: Mapping, claim_templates: Optional[Mapping[str, Mapping]] = None) -> PodSet:
    """A Workload's pod set with what each of its pods asks; ``claim_templates`` (by name): a Kueue that counts
    DRA claims, which this stack expects to map the DRANET NICs' class to :data:`~gke_ray_tpu.core.kueue.DCN_NIC`."""
    template = kueue_pod_set.get("template") or {}
    pod = template.get("spec") or {}
    requests = pod_requests(pod)
    if claim_templates:
        _add(requests, claimed_devices(pod, claim_templates, {NETDEV_DEVICE_CLASS: DCN_NIC}))
    return PodSet(kueue_pod_set["name"], int(kueue_pod_set["count"]), requests, template)


def ray_job_pod_sets(ray_job: Mapping, claim_templates: Optional[Mapping[str, Mapping]] = None, *,
                     grown: bool = False) -> list[PodSet]:
    """The pod sets Kueue builds for a RayJob that brings its cluster (:func:`kueue_pod_sets`), each with what
    its pods ask (:func:`pod_set`)."""
    return [pod_set(s, claim_templates) for s in kueue_pod_sets(ray_job, grown=grown)]


def usage(pod_sets: Iterable[PodSet]) -> dict[str, Decimal]:
    """What the pod sets take of a queue's quota, per resource."""
    total: dict[str, Decimal] = {}
    for one in pod_sets:
        _add(total, {resource: amount * one.count for resource, amount in one.requests.items()})
    return total


def queue_quota(ray_cluster_spec: Mapping, slices: int, submission_mode: str, *,
                claim_templates: Optional[Mapping[str, Mapping]] = None) -> dict[str, Decimal]:
    """The quota of a stack's queue for ``slices`` slices, ``ray_cluster_spec`` being the largest cluster a run
    brings (an elastic one grown to ``slices``, where runs may be elastic): the chips, cpu and memory of every
    slice's workers, and a head for as many runs as there are slices (a run holds at least one), so only the
    chips hold a run back; ``claim_templates``: a Kueue that counts DRA claims, the DCN NICs too."""
    job = {"spec": {"submissionMode": submission_mode, "rayClusterSpec": ray_cluster_spec}}
    sets = ray_job_pod_sets(job, claim_templates, grown=True)
    runs = [s.with_count(s.count * slices) for s in sets if s.name in (HEAD_POD_SET, SUBMITTER_POD_SET)]
    total = usage([*runs, *(s for s in sets if s.name not in (HEAD_POD_SET, SUBMITTER_POD_SET))])
    return {resource: amount for resource, amount in total.items() if resource in QUEUED_RESOURCES and amount}


QUEUED_RESOURCES = (TPU, DCN_NIC, "cpu", "memory")
"""What a stack's queue counts: the chips, the DCN NICs where that Kueue counts claims, and the pods' cpu and
memory, so that every pod set a run makes takes a flavor (``assignFlavors``)."""


# --- What Kueue cannot count --------------------------------------------------------------------------------

def claim_problems(claim_template: Mapping) -> list[str]:
    """What Kueue's DRA accounting refuses in a ResourceClaimTemplate a run's pods use (``pkg/dra/claims.go``):
    ``allocationMode: All`` (Autopilot's DRANET claim) leaves the Workload inadmissible."""
    requests = (((claim_template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []
    return [f"device request {r.get('name')!r} asks for all devices (allocationMode All), which Kueue cannot count"
            for r in requests if (r.get("exactly") or {}).get("allocationMode") == "All"]
