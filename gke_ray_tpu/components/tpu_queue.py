"""TpuQueue: Kueue in front of a RayTpuCluster's slices, so runs start on the chips there are, one after another.

It installs Kueue (``gke_ray_tpu.core.kueue.KUEUE_VERSION``, the project's Helm chart from
``registry.k8s.io``) with ``waitForPodsReady``, or uses the Kueue a cluster already runs, and declares the
stack's queue: a ResourceFlavor for the slice shape, a ClusterQueue whose chips are the stack's slices, a
LocalQueue in the stack's namespace that every run names in its ``kueue.x-k8s.io/queue-name`` label and,
for a one-slice flex-start stack that asks for it, GKE's queued provisioning as an admission check.
docs/queues.md says what a run then does, and what it can cost while it waits.
"""

from __future__ import annotations

from typing import NotRequired, Optional, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from gke_ray_tpu.components._args import integer
from gke_ray_tpu.components._options import child_options, custom_resource
from gke_ray_tpu.components.ray_manifests import CAPACITY_NODE_LABELS, RayClusterSpec, ray_cluster_spec, resource_claim_template
from gke_ray_tpu.components.ray_tpu_cluster import RayTpuCluster
from gke_ray_tpu.core import kueue
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kuberay import RUN_SUBMISSION_MODE
from gke_ray_tpu.core.naming import DNS_LABEL

CLUSTER_QUEUE_CRD = "clusterqueues.kueue.x-k8s.io"


class TpuQueueArgs(TypedDict):
    """Inputs of TpuQueue."""

    ray_cluster: RayTpuCluster
    """The RayTpuCluster whose runs the queue admits: its namespace holds the LocalQueue, its slice shape is the flavor, its slices the chips (slices x hosts x chips per host) and, with DCN networks, the NICs its workers claim. Its runs must bring their own cluster (scale_to_zero). From Python only for now."""
    install_kueue: NotRequired[bool]
    """Install Kueue (Helm chart, namespace kueue-system) with the waiting settings below; false: use the Kueue the cluster already runs (>= 0.16, serving kueue.x-k8s.io/v1beta2), installing nothing, and count cpu and memory too, as such a Kueue checks every resource. Default: true."""
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
    """Admit a run only once GKE's queued provisioning has its slice (a ProvisioningRequest admission check for the TPU pod set). Only for a one-slice flex-start RayTpuCluster whose node pool has queued provisioning enabled. Default: false."""


_INSTALL_ONLY = ("pods_ready_timeout_s", "requeue_limit")


def check_args(args: TpuQueueArgs, prefix: str = "TpuQueueArgs.") -> RayClusterSpec:
    """The rules on the arguments alone; returns the RayTpuCluster's spec."""
    cluster = args["ray_cluster"]
    if not isinstance(cluster, RayTpuCluster):
        raise ConfigError(f"{prefix}ray_cluster", cluster, "a RayTpuCluster (from Python)")
    spec = cluster.spec
    if not spec.scale_to_zero:
        raise ConfigError(f"{prefix}ray_cluster", spec.name, "a RayTpuCluster with scale_to_zero: Kueue queues runs "
                                                               "that bring their own cluster, not runs on a held one")
    if not args.get("install_kueue", True):
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
    if args.get("queued_provisioning") and (spec.capacity != "flex-start" or spec.num_slices != 1):
        raise ConfigError(f"{prefix}queued_provisioning", True,
                          f"false for {spec.num_slices} {spec.capacity} slice(s): GKE's queued provisioning takes one "
                          "pod set per request, every documented TPU example asks for one slice, and xpk uses it for "
                          "no TPU run; it is offered for one flex-start slice (docs/queues.md)")
    if spec.dcn_interfaces:
        problems = kueue.claim_problems(resource_claim_template(spec))
        if problems:
            raise ConfigError(f"{prefix}ray_cluster", spec.name, "a RayTpuCluster whose TPU workers Kueue can count: "
                                                                   + "; ".join(problems))
    return spec


def wait_settings(args: TpuQueueArgs, prefix: str = "TpuQueueArgs.") -> Optional[kueue.WaitSettings]:
    """What the installed Kueue waits for; None with an existing Kueue (its settings are its own)."""
    if not args.get("install_kueue", True):
        return None
    defaults = kueue.WaitSettings()
    return kueue.WaitSettings(
        timeout_s=integer(args.get("pods_ready_timeout_s", defaults.timeout_s), 60, None, f"{prefix}pods_ready_timeout_s"),
        requeue_limit=integer(args.get("requeue_limit", defaults.requeue_limit), 0, None, f"{prefix}requeue_limit"),
    )


def sharing(args: TpuQueueArgs, prefix: str = "TpuQueueArgs.") -> Optional[kueue.Sharing]:
    if "cohort" not in args:
        for key in ("borrowing_limit", "lending_limit"):
            if key in args:
                value = args[key]  # type: ignore[literal-required]
                raise ConfigError(f"{prefix}{key}", value, "unset: it applies within a cohort (set cohort)")
        return None
    limits = {key: integer(args[key], 0, None, f"{prefix}{key}")  # type: ignore[literal-required]
              for key in ("borrowing_limit", "lending_limit") if key in args}
    return kueue.Sharing(DNS_LABEL.check(args["cohort"], f"{prefix}cohort"), **limits)


def quota(spec: RayClusterSpec, count_host: bool) -> dict:
    """The chips (and the NICs they claim) of every slice of the RayTpuCluster, as Kueue counts its runs."""
    templates = {}
    if spec.dcn_interfaces:
        template = resource_claim_template(spec)
        templates[template["metadata"]["name"]] = template
    return kueue.queue_quota(ray_cluster_spec(spec), spec.num_slices, RUN_SUBMISSION_MODE, count_host=count_host,
                             claim_templates=templates)


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
        wait = wait_settings(args)
        super().__init__("gke-ray-tpu:index:TpuQueue", name, None, opts)
        names = kueue.queue_names(spec.name, spec.namespace, "TpuQueueArgs.ray_cluster")
        queued = bool(args.get("queued_provisioning"))
        self.kueue = None
        prerequisites: list[pulumi.Resource] = []
        if wait is not None:
            self.kueue = self._install(name, wait, bool(spec.dcn_interfaces), opts)
            prerequisites.append(self.kueue)
        child = child_options(self, opts, depends_on=prerequisites)

        chips = quota(spec, count_host=wait is None)
        manifests = [kueue.tpu_flavor(names, spec.shape, CAPACITY_NODE_LABELS.get(spec.capacity), queued)]
        if "cpu" in chips:
            manifests.append(kueue.host_flavor(names))
        if queued:
            manifests += [kueue.provisioning_request_config(names), kueue.admission_check(names)]
        self.flavors_and_checks = [custom_resource(f"{name}-{m['kind'].lower()}-{m['metadata']['name']}", m, child)
                                   for m in manifests]
        queue_opts = child_options(self, opts, depends_on=prerequisites + self.flavors_and_checks)
        self.cluster_queue_resource = custom_resource(f"{name}-cluster-queue", kueue.cluster_queue(
            names, spec.namespace, chips, sharing=sharing(args),
            queueing_strategy=args.get("queueing_strategy", kueue.STRICT_FIFO), admission_check=queued), queue_opts)
        self.local_queue_resource = custom_resource(
            f"{name}-local-queue", kueue.local_queue(names, spec.namespace),
            child_options(self, opts, depends_on=prerequisites + [self.cluster_queue_resource]))

        # Tied to the resources, so a run that takes the name waits for its queue to exist.
        self.local_queue = self.local_queue_resource.urn.apply(lambda _: names.local_queue)
        self.cluster_queue = self.cluster_queue_resource.urn.apply(lambda _: names.cluster_queue)
        self.tpu_quota = pulumi.Output.from_input(int(chips[kueue.TPU]))
        self.kueue_version = pulumi.Output.from_input(kueue.KUEUE_VERSION if wait else None)
        self.pods_ready_timeout_s = pulumi.Output.from_input(wait.timeout_s if wait else None)
        self.requeue_limit = pulumi.Output.from_input(wait.requeue_limit if wait else None)
        self.register_outputs({
            "localQueue": self.local_queue,
            "clusterQueue": self.cluster_queue,
            "tpuQuota": self.tpu_quota,
            "kueueVersion": self.kueue_version,
            "podsReadyTimeoutS": self.pods_ready_timeout_s,
            "requeueLimit": self.requeue_limit,
        })

    def _install(self, name: str, wait: kueue.WaitSettings, dcn_nics: bool,
                 opts: Optional[pulumi.ResourceOptions]) -> pulumi.Resource:
        """Kueue's Helm chart at the pinned version, rendered by Pulumi (every object a resource it tracks)."""
        namespace = k8s.core.v1.Namespace(
            f"{name}-kueue-namespace", metadata={"name": kueue.KUEUE_NAMESPACE}, opts=child_options(self, opts))
        return k8s.helm.v4.Chart(
            f"{name}-kueue",
            chart=kueue.KUEUE_CHART,
            version=kueue.KUEUE_VERSION,
            namespace=kueue.KUEUE_NAMESPACE,
            values=kueue.helm_values(wait, dcn_nics),
            opts=child_options(self, opts, depends_on=[namespace]),
        )
