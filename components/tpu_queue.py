"""TpuQueue: Kueue in front of a RayTpuCluster's slices, so runs start on the chips there are, one after another.

It installs Kueue (``gke_ray_tpu.core.kueue.KUEUE_VERSION``, the project's Helm chart from
``registry.k8s.io``) with ``waitForPodsReady``, or uses the Kueue a cluster already runs (checked at preview:
its ClusterQueue CRD must serve ``kueue.x-k8s.io/v1beta2``), and declares the stack's queue
(:func:`queue_objects`): a ResourceFlavor for the slice shape and one for the hosts' cpu and memory, a
ClusterQueue whose chips are the stack's slices and whose cpu and memory are their pods', a LocalQueue in the stack's namespace
that every run names in its ``kueue.x-k8s.io/queue-name`` label and, for a one-slice flex-start stack that asks
for it, GKE's queued provisioning as an admission check. docs/queues.md says what a run then does, and what it
can cost while it waits.
"""


from dataclasses import dataclass
from typing import Any, NotRequired, Optional, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from gke_ray_tpu.components import kueue_config, queue_manifests
from gke_ray_tpu.components._options import child_options
from gke_ray_tpu.components._refs import resolve_ref
from gke_ray_tpu.components.ray_manifests import RayClusterSpec, ray_cluster_spec, resource_claim_template
from gke_ray_tpu.components.ray_tpu_cluster import RayTpuCluster, RayTpuClusterArgs, RayTpuClusterRef, spec_from_args
from gke_ray_tpu.core import kueue, kueue_admission, kueue_quota
from gke_ray_tpu.core.bounds import Bounds
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kueue_waiting import WaitSettings
from gke_ray_tpu.core.naming import DNS_LABEL
from gke_ray_tpu.core.ray_job import SUBMISSION_MODE, with_slices

CLUSTER_QUEUE_CRD = "clusterqueues.kueue.x-k8s.io"
DEFAULT_INSTALL_KUEUE = True
PODS_READY_TIMEOUT = Bounds(60)
"""``podsReadyTimeout`` (``pods_ready_timeout_s``): seconds from admission by which a run's pods must all be ready."""
REQUEUE_LIMIT = Bounds(0)
"""``requeueLimit`` (``requeue_limit``): requeues before Kueue gives a run up."""
CHIP_LIMIT = Bounds(0)
"""``borrowingLimit`` and ``lendingLimit``: chips, within a cohort."""
DEFAULT_QUEUED_PROVISIONING = False


class TpuQueueArgs(TypedDict):
    """Inputs of TpuQueue."""

    ray_cluster: RayTpuClusterRef
    """The RayTpuCluster whose runs the queue admits: its namespace holds the LocalQueue, its slice shape is the flavor, its slices the chips (slices x hosts x chips per host). Its runs must bring their own cluster (scale_to_zero). From Python, the component itself; from other languages, its fields."""
    install_kueue: NotRequired[bool]
    """Install Kueue (Helm chart, namespace kueue-system) with the waiting settings below; false: use the Kueue the cluster already runs (>= 0.16, serving kueue.x-k8s.io/v1beta2, checked at preview), installing nothing, and count the workers' DCN NICs (as dcn-nic, which that Kueue must map netdev.google.com to) too, as such a Kueue counts DRA claims. Default: true."""
    pods_ready_timeout_s: NotRequired[int]
    """Seconds after admission by which a run's pods must all be ready, else Kueue evicts it (KubeRay deletes its cluster, releasing the slices that came) and requeues it. Only when installing Kueue. Default: 1800, Kueue's."""
    requeue_limit: NotRequired[int]
    """Requeues after which Kueue stops requeueing a run that never got all its pods ready (it deactivates its Workload). Only when installing Kueue. Default: 3."""
    queueing_strategy: NotRequired[str]
    """StrictFIFO (a run that does not fit holds back the runs behind it, so a big run is never passed over) or BestEffortFIFO (smaller runs behind it may start). Default: StrictFIFO."""
    cohort: NotRequired[str]
    """A Kueue cohort to share chips with other teams' queues: unused chips of one may be lent to another."""
    borrowing_limit: NotRequired[int]
    """With a cohort: chips this queue may borrow beyond its own. Default: as many as the others leave unused."""
    lending_limit: NotRequired[int]
    """With a cohort: chips of its own the others may borrow. Default: all of them while unused."""
    queued_provisioning: NotRequired[bool]
    """Admit a run only once GKE's queued provisioning has its slice (a ProvisioningRequest admission check for the TPU pod set). Only for a one-slice flex-start RayTpuCluster whose node pool has queued provisioning enabled (TpuSliceNodePool's queued_provisioning). Default: false."""
    max_run_duration_s: NotRequired[int]
    """With queued provisioning: seconds after which GKE ends the nodes it provisioned for a run (the request's maxRunDurationSeconds). Default: GKE's 7 days."""


class TpuQueueRef(TypedDict):
    """What a run needs of a TpuQueue: the LocalQueue its RayJob names, and how long Kueue waits for its pods. From Python, pass the TpuQueue itself. The provider cannot pass a component between languages (a reference arrives as its URN only), so other languages set these fields: localQueue from its output, so that the run waits for the queue."""

    local_queue: pulumi.Input[str]
    """The LocalQueue (TpuQueue's localQueue)."""
    pods_ready_timeout_s: NotRequired[int]
    """Kueue's PodsReady timeout (TpuQueue's podsReadyTimeoutS); unset: Kueue's default, 1800 (a cluster's own Kueue)."""


_INSTALL_ONLY = ("pods_ready_timeout_s", "requeue_limit")


def queued_cluster(args: TpuQueueArgs, prefix: str = "TpuQueueArgs.") -> tuple[RayClusterSpec, Any]:
    """The RayTpuCluster's spec (what its runs ask of the queue) and its name (a str, or a Pulumi Input of one
    from another language, checked once known)."""
    value = args["ray_cluster"]
    if isinstance(value, RayTpuCluster):
        return value.spec, value.spec.name
    ref = resolve_ref(value, RayTpuCluster, f"{prefix}ray_cluster")
    name = ref["ray_cluster_name"]
    fields = {key: ref[key] for key in ("generation", "topology", "num_slices", "elastic_min_slices", "capacity",
                                        "scale_to_zero", "dcn_interfaces", "compute_class") if key in ref}
    spec = spec_from_args(RayTpuClusterArgs(
        workload_identity={"bucket_name": ref["bucket_name"], "ksa_name": "ray", "namespace": ref["namespace"]},
        **({"ray_cluster_name": name} if isinstance(name, str) else {}), **fields), f"{prefix}ray_cluster.")
    return spec, name


def check_args(args: TpuQueueArgs, prefix: str = "TpuQueueArgs.") -> RayClusterSpec:
    """The rules on the arguments alone; returns the RayTpuCluster's spec."""
    spec, name = queued_cluster(args, prefix)
    if not spec.scale_to_zero:
        raise ConfigError(f"{prefix}ray_cluster", spec.name, "a RayTpuCluster with scale_to_zero: Kueue queues runs "
                                                               "that bring their own cluster, not runs on a held one")
    if isinstance(name, str):
        kueue.queue_names(name, spec.namespace, f"{prefix}ray_cluster")
    if not args.get("install_kueue", DEFAULT_INSTALL_KUEUE):
        for key in _INSTALL_ONLY:
            if key in args:
                value = args[key]  # type: ignore[literal-required]
                raise ConfigError(f"{prefix}{key}", value, "unset: an existing Kueue keeps its own settings "
                                                           "(install_kueue is false)")
    wait_settings(args, prefix)
    strategy = args.get("queueing_strategy", kueue.STRICT_FIFO)
    if strategy not in kueue.QUEUEING_STRATEGIES:
        raise ConfigError(f"{prefix}queueing_strategy", strategy, " or ".join(kueue.QUEUEING_STRATEGIES))
    sharing(args, prefix)
    queued = bool(args.get("queued_provisioning", DEFAULT_QUEUED_PROVISIONING))
    if queued:
        check_queued_provisioning(spec.capacity.name, spec.num_slices, f"{prefix}queued_provisioning")
    if "max_run_duration_s" in args and not queued:
        raise ConfigError(f"{prefix}max_run_duration_s", args["max_run_duration_s"],
                          "unset: it bounds a queued-provisioning request (set queued_provisioning)")
    if spec.dcn_interfaces and not args.get("install_kueue", DEFAULT_INSTALL_KUEUE):
        # The Kueue the stack installs leaves DRA claims uncounted; a cluster's own counts them (core.kueue_quota).
        problems = kueue_quota.claim_problems(resource_claim_template(spec))
        if problems:
            raise ConfigError(f"{prefix}ray_cluster", spec.name, "a RayTpuCluster whose TPU workers a cluster's own "
                              "Kueue can count (or install_kueue true: the stack's Kueue leaves claims uncounted): "
                              + "; ".join(problems))
    return spec


def check_queued_provisioning(capacity: str, num_slices: int, key: str) -> None:
    """Queued provisioning for one flex-start slice only (docs/queues.md: Flex-start and queued provisioning)."""
    if capacity != "flex-start" or num_slices != 1:
        raise ConfigError(key, True, f"false for {num_slices} {capacity} slice(s): GKE's queued provisioning takes one "
                          "pod set per request, every documented TPU example asks for one slice, and xpk uses it for "
                          "no TPU run; it is offered for one flex-start slice (docs/queues.md)")


def wait_settings(args: TpuQueueArgs, prefix: str = "TpuQueueArgs.") -> Optional[WaitSettings]:
    """What the installed Kueue waits for; None with an existing Kueue (its settings are its own)."""
    if not args.get("install_kueue", DEFAULT_INSTALL_KUEUE):
        return None
    defaults = WaitSettings()
    return WaitSettings(
        timeout_s=PODS_READY_TIMEOUT.check(args.get("pods_ready_timeout_s", defaults.timeout_s),
                                           f"{prefix}pods_ready_timeout_s"),
        requeue_limit=REQUEUE_LIMIT.check(args.get("requeue_limit", defaults.requeue_limit), f"{prefix}requeue_limit"),
    )


def sharing(args: TpuQueueArgs, prefix: str = "TpuQueueArgs.") -> Optional[queue_manifests.Sharing]:
    if "cohort" not in args:
        for key in ("borrowing_limit", "lending_limit"):
            if key in args:
                value = args[key]  # type: ignore[literal-required]
                raise ConfigError(f"{prefix}{key}", value, "unset: it applies within a cohort (set cohort)")
        return None
    limits = {key: CHIP_LIMIT.check(args[key], f"{prefix}{key}")  # type: ignore[literal-required]
              for key in ("borrowing_limit", "lending_limit") if key in args}
    return queue_manifests.Sharing(DNS_LABEL.check(args["cohort"], f"{prefix}cohort"), **limits)


def quota(spec: RayClusterSpec, counts_claims: bool) -> dict:
    """What the queue holds: for every slice of the RayTpuCluster its workers' chips, cpu and memory, and a head
    per slice (a run holds at least one), the head an elastic run's (with Ray's autoscaler) where runs may be
    elastic, so that only the chips hold a run back; ``counts_claims`` (a cluster's own Kueue, which counts DRA
    claims): the workers' DCN NICs too."""
    templates = {}
    if spec.dcn_interfaces and counts_claims:
        template = resource_claim_template(spec)
        templates[template["metadata"]["name"]] = template
    elastic = spec.elastic_min_slices < spec.num_slices
    largest = with_slices(ray_cluster_spec(spec), spec.num_slices, spec.elastic_min_slices if elastic else None)
    return kueue_quota.queue_quota(largest, spec.num_slices, SUBMISSION_MODE, claim_templates=templates)


@dataclass(frozen=True)
class QueueObjects:
    """The Kueue objects of a stack's queue, and how that Kueue counts a run (what ``core.kueue_admission``
    needs to say whether it admits one)."""

    flavors: list
    """The ResourceFlavors: the slice shape's, then the host's."""
    cluster_queue: dict
    local_queue: dict
    checks: list
    """With queued provisioning: the ProvisioningRequestConfig and the AdmissionCheck."""
    strategy: str
    """That Kueue's ``quotaCheckStrategy``."""
    claim_templates: Optional[dict]
    """The ResourceClaimTemplates by name where that Kueue counts DRA claims; None: it does not."""


def queue_objects(args: TpuQueueArgs, spec: RayClusterSpec, names: kueue.QueueNames) -> QueueObjects:
    """What TpuQueue declares for ``spec``'s runs (``check_args`` has passed), as pure manifests."""
    installed = args.get("install_kueue", DEFAULT_INSTALL_KUEUE)
    queued = bool(args.get("queued_provisioning", DEFAULT_QUEUED_PROVISIONING))
    checks = []
    if queued:
        checks = [queue_manifests.provisioning_request_config(names, args.get("max_run_duration_s")),
                  queue_manifests.admission_check(names)]
    claims = None
    if not installed:
        template = resource_claim_template(spec)
        claims = {template["metadata"]["name"]: template} if spec.dcn_interfaces else {}
    return QueueObjects(
        flavors=[queue_manifests.tpu_flavor(names, spec.shape, spec.capacity.node_label, queued),
                 queue_manifests.host_flavor(names)],
        cluster_queue=queue_manifests.cluster_queue(
            names, spec.namespace, quota(spec, counts_claims=not installed), sharing=sharing(args),
            queueing_strategy=args.get("queueing_strategy", kueue.STRICT_FIFO), admission_check=queued),
        local_queue=queue_manifests.local_queue(names, spec.namespace),
        checks=checks,
        strategy=kueue.quota_check_strategy(installed),
        claim_templates=claims,
    )


def queue_problem(objects: QueueObjects, run_cluster: dict) -> Optional[str]:
    """Why the queue could never admit a run that brings ``run_cluster`` (at its full size, an elastic run
    grown), in Kueue's words where Kueue has them; None: it could (``core.kueue_admission.admission_problem``)."""
    job = {"spec": {"submissionMode": SUBMISSION_MODE, "rayClusterSpec": run_cluster}}
    pod_sets = kueue_quota.ray_job_pod_sets(job, objects.claim_templates, grown=True)
    flavors = {f["metadata"]["name"]: f for f in objects.flavors}
    return kueue_admission.admission_problem(pod_sets, objects.cluster_queue, flavors, objects.strategy)


def submitted_runs(spec: RayClusterSpec) -> list[tuple[int, Optional[int]]]:
    """Every size of run the submit command can make on the stack, as (slices, start slices): ``--slices`` 1 to
    numSlices, and elastic from elasticMinSlices (None: not elastic; ``training.driver.submission``)."""
    runs: list[tuple[int, Optional[int]]] = [(slices, None) for slices in range(1, spec.num_slices + 1)]
    return runs + [(slices, spec.elastic_min_slices) for slices in range(spec.elastic_min_slices + 1, spec.num_slices + 1)]


def queue_ref(local_queue: pulumi.Input[str], wait: Optional[WaitSettings]) -> TpuQueueRef:
    timeout = {"pods_ready_timeout_s": wait.timeout_s} if wait is not None else {}
    return TpuQueueRef(local_queue=local_queue, **timeout)


def served_kueue(name: str, key: str, opts: pulumi.ResourceOptions) -> pulumi.Output[pulumi.Resource]:
    """Read the ClusterQueue CRD the cluster serves (``pulumi preview`` reads it too) and fail unless it serves
    ``kueue.x-k8s.io/v1beta2``, the API the queue's objects are written in (Kueue >= 0.16; 0.15 and older serve
    v1beta1 only). Pass the result in ``depends_on``: nothing of the queue is created on a cluster without it."""
    crd = k8s.apiextensions.v1.CustomResourceDefinition.get(name, CLUSTER_QUEUE_CRD, opts=opts)

    def check(spec) -> pulumi.Resource:
        served = sorted(v.get("name") for v in spec.get("versions") or [] if v.get("served"))
        if "v1beta2" not in served:
            raise ConfigError(key, False, f"a cluster whose Kueue serves kueue.x-k8s.io/v1beta2 (Kueue >= 0.16): its "
                                          f"{CLUSTER_QUEUE_CRD} CRD serves {', '.join(served) or 'no version'}; "
                                          "upgrade it, or let the stack install Kueue")
        return crd

    return crd.spec.apply(check)


class TpuQueue(pulumi.ComponentResource):
    """Kueue and the stack's queue for its TPU slices. Needs the Kubernetes provider of the cluster (opts providers)."""

    local_queue: pulumi.Output[str]
    """The LocalQueue runs name in their kueue.x-k8s.io/queue-name label (in the RayTpuCluster's namespace)."""
    cluster_queue: pulumi.Output[str]
    """The ClusterQueue that holds the chips."""
    tpu_quota: pulumi.Output[int]
    """Chips the queue holds: slices x hosts x chips per host."""
    kueue_version: pulumi.Output[Optional[str]]
    """The Kueue installed here; null when the cluster's own is used."""
    pods_ready_timeout_s: pulumi.Output[Optional[int]]
    """Kueue's PodsReady timeout; null when the cluster's own Kueue is used (its setting is unknown here)."""
    requeue_limit: pulumi.Output[Optional[int]]
    """Requeues before Kueue gives a run up; null with the cluster's own Kueue."""

    def __init__(self, name: str, args: TpuQueueArgs, opts: Optional[pulumi.ResourceOptions] = None):
        spec = check_args(args)
        _, cluster_name = queued_cluster(args)
        wait = wait_settings(args)
        super().__init__("gke-ray-tpu:index:TpuQueue", name, None, opts)
        key = "TpuQueueArgs.ray_cluster"
        names = pulumi.Output.from_input(cluster_name).apply(lambda n: kueue.queue_names(n, spec.namespace, key))
        queued = bool(args.get("queued_provisioning", DEFAULT_QUEUED_PROVISIONING))
        self.kueue = None
        prerequisites: list[Any] = []
        if wait is not None:
            self.kueue = self._install(name, wait, opts)
            prerequisites.append(self.kueue)
        else:
            prerequisites.append(served_kueue(f"{name}-served-clusterqueue-crd", "TpuQueueArgs.install_kueue",
                                              child_options(self, opts)))
        child = child_options(self, opts, depends_on=prerequisites)

        objects = names.apply(lambda n: queue_objects(args, spec, n))
        parts = [("tpu-flavor", "ResourceFlavor", objects.apply(lambda o: o.flavors[0])),
                 ("host-flavor", "ResourceFlavor", objects.apply(lambda o: o.flavors[1]))]
        if queued:
            parts += [("provisioning-config", "ProvisioningRequestConfig", objects.apply(lambda o: o.checks[0])),
                      ("admission-check", "AdmissionCheck", objects.apply(lambda o: o.checks[1]))]
        self.flavors_and_checks = [_kueue_object(f"{name}-{part}", kind, manifest, child)
                                   for part, kind, manifest in parts]
        self.cluster_queue_resource = _kueue_object(
            f"{name}-cluster-queue", "ClusterQueue", objects.apply(lambda o: o.cluster_queue),
            child_options(self, opts, depends_on=prerequisites + self.flavors_and_checks))
        self.local_queue_resource = _kueue_object(
            f"{name}-local-queue", "LocalQueue", objects.apply(lambda o: o.local_queue),
            child_options(self, opts, depends_on=prerequisites + [self.cluster_queue_resource]))

        # Tied to the resources, so a run that takes the name waits for its queue to exist.
        self.local_queue = pulumi.Output.all(self.local_queue_resource.urn, names).apply(lambda r: r[1].local_queue)
        self.cluster_queue = pulumi.Output.all(self.cluster_queue_resource.urn, names).apply(lambda r: r[1].cluster_queue)
        self.tpu_quota = pulumi.Output.from_input(int(quota(spec, counts_claims=wait is None)[kueue.TPU]))
        self.kueue_version = pulumi.Output.from_input(kueue.KUEUE_VERSION if wait else None)
        self.pods_ready_timeout_s = pulumi.Output.from_input(wait.timeout_s if wait else None)
        self.requeue_limit = pulumi.Output.from_input(wait.requeue_limit if wait else None)
        self.ref = queue_ref(self.local_queue, wait)
        self.register_outputs({
            "localQueue": self.local_queue,
            "clusterQueue": self.cluster_queue,
            "tpuQuota": self.tpu_quota,
            "kueueVersion": self.kueue_version,
            "podsReadyTimeoutS": self.pods_ready_timeout_s,
            "requeueLimit": self.requeue_limit,
        })

    def _install(self, name: str, wait: WaitSettings, opts: Optional[pulumi.ResourceOptions]) -> pulumi.Resource:
        """Kueue's Helm chart at the pinned version, rendered by Pulumi (every object a resource it tracks)."""
        namespace = k8s.core.v1.Namespace(
            f"{name}-kueue-namespace", metadata={"name": kueue_config.KUEUE_NAMESPACE}, opts=child_options(self, opts))
        return k8s.helm.v4.Chart(
            f"{name}-kueue",
            chart=kueue_config.KUEUE_CHART,
            version=kueue.KUEUE_VERSION,
            namespace=kueue_config.KUEUE_NAMESPACE,
            values=kueue_config.helm_values(wait),
            opts=child_options(self, opts, depends_on=[namespace]),
        )


def _kueue_object(name: str, kind: str, manifest: pulumi.Output,
                  opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    """A Kueue object of ``kind`` from its manifest (``components.queue_manifests`` builds it once the RayTpuCluster's name is
    known); the kind is plain, as the resource's type is made of it."""
    return k8s.apiextensions.CustomResource(
        name, api_version=kueue.API_VERSION, kind=kind,
        metadata=manifest.apply(lambda m: m["metadata"]), spec=manifest.apply(lambda m: m["spec"]), opts=opts)
