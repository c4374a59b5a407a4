"""Kueue for a stack's TPUs: the queue's objects, what a run asks of it and what waiting for it can cost, and a
Workload read back as one line for a person. Kueue's rules for a RayJob are among the one rule set every RayJob
passes (``gke_ray_tpu.core.kuberay.ray_job_problems``).

Pure (no Pulumi, no Kubernetes client): the TpuQueue component declares these objects, the submit command
checks and reads with them, and the tests hold them against Kueue's CRDs and a fake Kueue. Everything here
was read in Kueue v0.19.2 (``git show v0.19.2:<file>`` of kubernetes-sigs/kueue), the release the stack
installs; docs/queues.md says what it means for a run and what stays unverified.

* The API is ``kueue.x-k8s.io/v1beta2``, Kueue's storage version (``apis/kueue/v1beta2``); a ClusterQueue
  names its team grouping ``cohortName`` and its checks ``admissionChecksStrategy.admissionChecks``.
* A RayJob's pod sets (``pkg/controller/jobs/raycluster/common.go`` ``BuildPodSets``,
  ``pkg/controller/jobs/rayjob/rayjob_controller.go`` ``PodSets``): the head (1 pod, plus Ray's autoscaler
  sidecar when in-tree autoscaling is on, plus the submitter container in SidecarMode), one per worker group
  of ``replicas x numOfHosts`` pods, and a submitter pod set in K8sJobMode.
* The Kueue the stack installs counts the chips only (``resources.quotaCheckStrategy: IgnoreUndeclared``, a
  Beta feature on by default in 0.19): its ClusterQueue covers ``google.com/tpu``, not cpu and memory. Chips
  are what the queue is for; the CPU head runs on the stack's CPU pool; and with cpu covered, Kueue would as
  often name cpu as the chips when it says why a run waits (it walks a pod set's resources in map order,
  ``pkg/resources/requests.go``). It runs with its DRA accounting off (:data:`FEATURE_GATES`): the DCN NICs a
  TPU worker claims are its host's own, so the chips already bound them, and with the accounting on Kueue
  leaves a run inadmissible unless every claimed device class is mapped to a resource, and always for
  Autopilot's claim of every NIC (``allocationMode: All``, ``pkg/dra/claims.go``). A Kueue installed by someone
  else checks every resource a pod requests unless told otherwise (``BlockUndeclared``) and counts DRA claims
  (``KueueDRAIntegration``, on by default since 0.18), so a queue there covers cpu, memory and the NICs
  (as :data:`DCN_NIC`: that Kueue must map ``netdev.google.com`` to it) as well.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Iterable, Mapping, Optional, Sequence

import yaml

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.naming import DNS_LABEL
from gke_ray_tpu.core.tpu_catalogue import SliceShape

KUEUE_VERSION = "0.19.2"
"""The Kueue the stack installs: its Helm chart version (the image is ``registry.k8s.io/kueue/kueue:v0.19.2``,
``hack/helm-chart-package.sh``). 0.19.1 is the first that releases the quota of a RayJob that fails validation."""
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_NAMESPACE = "kueue-system"
API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label that puts a RayJob in a LocalQueue (``pkg/controller/constants``)."""
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label on a Workload holding the UID of the job it was made for."""
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
"""With ``"true"`` (and in-tree autoscaling), Kueue follows the run's RayCluster as it grows, admitting each
larger size as a new Workload slice (``pkg/workloadslicing``; the ElasticJobsViaWorkloadSlices gate, on by
default since 0.18)."""
MAX_POD_SETS = 18
"""``jobframework.MaxPodSets``: the head and at most 17 worker groups."""
HEAD_POD_SET = "head"
TPU = "google.com/tpu"
DCN_NIC = "dcn-nic"
"""The resource a cluster's own Kueue is expected to count the DRANET NICs a TPU worker claims as (its
``resources.deviceClassMappings``); the Kueue the stack installs does not count them (:data:`FEATURE_GATES`)."""
NETDEV_DEVICE_CLASS = "netdev.google.com"
TPU_TOLERATION = {"key": TPU, "operator": "Exists", "effect": "NoSchedule"}
"""GKE taints TPU nodes ``google.com/tpu``; a flavor's tolerations are added to the pods Kueue admits to it.
Not ``nodeTaints``: those are checked against the pod set's own tolerations, which the template lacks (GKE
adds the toleration to TPU pods only when they are created)."""
QUEUED_PROVISIONING_TAINT = "cloud.google.com/gke-queued"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
IGNORE_UNDECLARED = "IgnoreUndeclared"
EVICTED_BY_PODS_READY_TIMEOUT = "PodsReadyTimeout"
STRICT_FIFO, BEST_EFFORT_FIFO = "StrictFIFO", "BestEffortFIFO"
QUEUEING_STRATEGIES = (STRICT_FIFO, BEST_EFFORT_FIFO)
FEATURE_GATES = {"KueueDRAIntegration": False, "KueueDRARejectWorkloadsWhenDRADisabled": False}
"""The installed Kueue's DRA accounting, off (both Beta and on by default since 0.18, ``pkg/features/kube_features.go``):
with it off Kueue neither counts nor refuses the DCN claims of the TPU workers (``core/workload_controller.go``)."""
RAY_FRAMEWORKS = ("batch/job", "ray.io/rayjob", "ray.io/raycluster")
"""The integrations the stack's Kueue runs: RayJobs, and RayClusters because an elastic run's cluster gets its
scheduling gates from the RayCluster webhook (``raycluster_webhook.go``). batch/job is Kueue's own default."""
AUTOSCALER_REQUESTS = {"cpu": "500m", "memory": "512Mi"}
"""What Kueue counts for Ray's autoscaler sidecar when the spec sets none (``defaultAutoscalerResources``)."""
SUBMITTER_REQUESTS = {"cpu": "500m", "memory": "200Mi"}
"""What Kueue counts for KubeRay's default submitter (``defaultSubmitterResources``)."""


# --- Quantities -----------------------------------------------------------------------------------------------

_SUFFIXES = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60, "n": Decimal("1e-9"), "u": Decimal("1e-6"),
    "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
    "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?")


def quantity(value: object) -> Decimal:
    """A Kubernetes resource quantity (``8``, ``500m``, ``16Gi``, ``200G``, ``1e3``) as a number."""
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return Decimal(value)
    match = _QUANTITY.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, exponent, suffix = match.groups()
    scale = Decimal(10) ** int(exponent) if exponent else _SUFFIXES[suffix or ""]
    return Decimal(number) * scale


def format_quantity(value: Decimal) -> object:
    """A quantity for a manifest: a whole number as an int, a fraction in milli-units, whole GiB as ``NGi``."""
    if value != value.to_integral_value():
        return f"{int((value * 1000).to_integral_value())}m"
    whole = int(value)
    gib = 2 ** 30
    return f"{whole // gib}Gi" if whole >= gib and whole % gib == 0 else whole


# --- Names -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueueNames:
    """The names of one stack's Kueue objects. The LocalQueue lives in the stack's namespace; the others are
    cluster-scoped, so they carry the namespace too and two stacks on one GKE cluster never share one."""

    local_queue: str
    cluster_queue: str
    tpu_flavor: str
    host_flavor: str
    admission_check: str


def queue_names(ray_cluster_name: str, namespace: str, key: str) -> QueueNames:
    """Every name derived from the stack's RayTpuCluster name and namespace, each a DNS label (the LocalQueue's
    is a label value on every run, and Kueue puts the others in labels and metrics); ``key`` is the setting the
    names come from, for the error."""
    scoped = f"{ray_cluster_name}-{namespace}"
    names = QueueNames(
        local_queue=ray_cluster_name,
        cluster_queue=scoped,
        tpu_flavor=f"{scoped}-tpu",
        host_flavor=f"{scoped}-host",
        admission_check=f"{scoped}-provisioning",
    )
    for field_name, name in vars(names).items():
        DNS_LABEL.check_derived(name, ray_cluster_name, key, f"Kueue {field_name.replace('_', ' ')} name")
    return names


def queue_label(local_queue: str) -> dict:
    """The label every run of a stack with a queue carries, declared or submitted (``RayJobRun.labels``)."""
    return {QUEUE_LABEL: local_queue}


# --- The queue's objects ---------------------------------------------------------------------------------------

def _object(kind: str, name: str, spec: dict, namespace: Optional[str] = None) -> dict:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def tpu_flavor(names: QueueNames, shape: SliceShape, capacity_label: Optional[str], queued: bool) -> dict:
    """The ResourceFlavor of the stack's slice shape: GKE's TPU node labels (and the capacity mode's, which the
    worker pods select too), tolerating the TPU taint, and with queued provisioning the ``gke-queued`` one."""
    labels = {
        "cloud.google.com/gke-tpu-accelerator": shape.generation.gke_accelerator,
        "cloud.google.com/gke-tpu-topology": shape.topology,
    }
    if capacity_label:
        labels[capacity_label] = "true"
    tolerations = [dict(TPU_TOLERATION)]
    if queued:
        tolerations.append({"key": QUEUED_PROVISIONING_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    return _object("ResourceFlavor", names.tpu_flavor, {"nodeLabels": labels, "tolerations": tolerations})


def host_flavor(names: QueueNames) -> dict:
    """The flavor cpu and memory are counted under: no node labels, so admitting the CPU head to it places it
    nowhere in particular. With one flavor for all resources, Kueue would give the head the TPU node labels."""
    return _object("ResourceFlavor", names.host_flavor, {})


@dataclass(frozen=True)
class Sharing:
    """How a stack's queue shares TPU chips with other teams' queues (a Kueue cohort)."""

    cohort: str
    borrowing_limit: Optional[int] = None
    """Chips this queue may borrow from the cohort; None: as many as the others leave unused."""
    lending_limit: Optional[int] = None
    """Chips of its own the others may borrow; None: all of them while unused."""


def cluster_queue(names: QueueNames, namespace: str, quota: Mapping[str, Decimal], *,
                  sharing: Optional[Sharing] = None, queueing_strategy: str = STRICT_FIFO,
                  admission_check: bool = False) -> dict:
    """The stack's ClusterQueue: ``quota`` (``queue_quota``), its TPU resources under the slice shape's flavor
    and, when the quota counts them, cpu and memory under the host flavor; runs from the stack's namespace only
    (a null ``namespaceSelector`` admits none)."""
    tpu_resources = [r for r in (TPU, DCN_NIC) if quota.get(r)]
    tpu = [_quota_entry(r, quota[r], sharing if r == TPU else None) for r in tpu_resources]
    groups = [{"coveredResources": tpu_resources, "flavors": [{"name": names.tpu_flavor, "resources": tpu}]}]
    if "cpu" in quota:
        host = [_quota_entry(r, quota[r], None) for r in ("cpu", "memory")]
        groups.append({"coveredResources": ["cpu", "memory"],
                       "flavors": [{"name": names.host_flavor, "resources": host}]})
    spec: dict = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "queueingStrategy": queueing_strategy,
        "resourceGroups": groups,
    }
    if sharing:
        spec["cohortName"] = sharing.cohort
    if admission_check:
        spec["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": names.admission_check, "onFlavors": [names.tpu_flavor]}]
        }
    return _object("ClusterQueue", names.cluster_queue, spec)


def _quota_entry(resource: str, nominal: Decimal, sharing: Optional[Sharing]) -> dict:
    entry: dict = {"name": resource, "nominalQuota": format_quantity(nominal)}
    if sharing and sharing.borrowing_limit is not None:
        entry["borrowingLimit"] = sharing.borrowing_limit
    if sharing and sharing.lending_limit is not None:
        entry["lendingLimit"] = sharing.lending_limit
    return entry


def local_queue(names: QueueNames, namespace: str) -> dict:
    return _object("LocalQueue", names.local_queue, {"clusterQueue": names.cluster_queue}, namespace)


def admission_check(names: QueueNames) -> dict:
    """The AdmissionCheck that sends the TPU pod set to GKE's queued provisioning (flex-start, one slice)."""
    return _object("AdmissionCheck", names.admission_check, {
        "controllerName": PROVISIONING_CONTROLLER,
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                       "name": names.admission_check},
    })


def provisioning_request_config(names: QueueNames, max_run_duration_s: Optional[int] = None) -> dict:
    """Its ProvisioningRequestConfig: GKE's queued-provisioning class for the pod sets that ask for TPU chips
    only (``managedResources``), so the CPU head is not part of the request."""
    spec: dict = {"provisioningClassName": QUEUED_PROVISIONING_CLASS, "managedResources": [TPU]}
    if max_run_duration_s is not None:
        spec["parameters"] = {"maxRunDurationSeconds": str(max_run_duration_s)}
    return _object("ProvisioningRequestConfig", names.admission_check, spec)


# --- Kueue's own configuration (what the Helm chart's managerConfig carries) -----------------------------------

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


def manager_config(wait: WaitSettings) -> dict:
    """Kueue's Configuration for the Helm chart's ``managerConfig.controllerManagerConfigYaml``.

    The chart renders that YAML as the whole configuration (``templates/manager/manager-config.yaml`` adds
    only ``internalCertManagement``), so the settings of the chart's default (``charts/kueue/values.yaml``) are
    repeated here, less its integrations: the stack's Kueue runs the Ray ones only."""
    config: dict = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 300, "burst": 500},
        "waitForPodsReady": {
            "timeout": f"{wait.timeout_s}s",
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": wait.backoff_base_s,
                "backoffMaxSeconds": wait.backoff_max_s,
                **({"backoffLimitCount": wait.requeue_limit} if wait.requeue_limit is not None else {}),
            },
        },
        "integrations": {"frameworks": list(RAY_FRAMEWORKS)},
        "resources": {"quotaCheckStrategy": IGNORE_UNDECLARED},
    }
    return config


def helm_values(wait: WaitSettings) -> dict:
    """The chart values the stack sets: its configuration and :data:`FEATURE_GATES` (``controllerManager.featureGates``,
    ``charts/kueue/values.yaml``), nothing else (the chart pins the image)."""
    return {"controllerManager": {"featureGates": [{"name": name, "enabled": on} for name, on in FEATURE_GATES.items()]},
            "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(wait),
                                                                            sort_keys=False)}}


# --- What a run asks of the queue ------------------------------------------------------------------------------

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


# --- What waiting for slices that never come can cost ----------------------------------------------------------

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
    cause = ("evicted for slow slices (its pods were not all ready in time)" if reason == EVICTED_BY_PODS_READY_TIMEOUT
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
