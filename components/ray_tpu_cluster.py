"""RayTpuCluster: the KubeRay RayCluster (and DRA network claim, and the NetworkPolicy over its Ray pods) for multislice TPU training.

A cluster that holds its slices is one long-lived RayCluster. One that scales them to zero
has none: each run brings a RayCluster of :attr:`RayTpuCluster.ray_cluster_spec` in its RayJob
and KubeRay deletes it when the run ends, so no TPU node is left once the runs are over.
"""

import re
from typing import Any, Callable, Mapping, NotRequired, Optional, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from gke_ray_tpu.components._options import child_options, custom_resource, typed_resource
from gke_ray_tpu.components._refs import resolve_ref
from gke_ray_tpu.components.gcs_workload_identity import GcsWorkloadIdentity, GcsWorkloadIdentityRef
from gke_ray_tpu.components.ray_manifests import (
    DASHBOARD_PORT,
    POD_PORTS,
    RAY_RANDOM_PORTS,
    RAY_WORKER_PORTS,
    RayClusterSpec,
    compute_class,
    network_policy,
    port_use,
    ray_cluster,
    ray_cluster_spec,
    resource_claim_template,
)
from gke_ray_tpu.core.bounds import Bounds
from gke_ray_tpu.core.capacity import DEFAULT_CAPACITY, capacity_mode, check_autopilot_capacity
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kuberay import (
    MIN_KUBERAY_AUTH, MIN_KUBERAY_OWN_CLUSTERS, RAY_VERSION, RAYCLUSTER_CRD, RAYJOB_CRD, served_crd_problems,
    served_rayjob_problems,
)
from gke_ray_tpu.core.naming import DNS_LABEL, DNS_SUBDOMAIN, RAY_CLUSTER_NAME, RAY_TPU_CLUSTER_NAME
from gke_ray_tpu.core.slices import DEFAULT_NUM_SLICES, NUM_SLICES, elastic_min_slices
from gke_ray_tpu.core.tpu_catalogue import DEFAULT_GENERATION, DEFAULT_TOPOLOGY, slice_shape

DEFAULT_NAME = "maxtext-tpu-cluster"
DEFAULT_IMAGE = f"rayproject/ray:{RAY_VERSION}-py312"
"""Ray's release image of the Ray the job is written for (the driver's), pulled once per node, and the base
of the stack's WorkerImage.

Not the tutorial's ``nightly-py312-tpu``: a moving tag runs whatever Ray master built last night with the
job's bucket rights, and may switch Ray's defaults (token auth) under the stack. Ray publishes TPU images
as nightlies only, and the TPU stack need not come from Ray: the head's driver never imports JAX, and the
TPU workers get JAX, libtpu and MaxText from the lock (``core/worker_env``), baked in by
WorkerImage or installed at start on this image. Ray finds the chips from the devices and GKE's TPU env
vars, without libtpu. docs/security.md has the sources."""
DEFAULT_MEGASCALE_PORT = 9915
MEGASCALE_PORT = Bounds(1024, 65535)
"""``megascalePort`` (``megascale_port``): a port the TPU workers' JAX binds, no privileged one; within these,
:func:`check_megascale_port` also refuses the ports Ray may hold on the same pod."""
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/-]*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?")
IDLE_TIMEOUT_RETIRED = (
    "with scale to zero each run brings its own RayCluster and KubeRay deletes it when the run ends, so no slice "
    "waits idle for a timeout (Ray's autoscaler, which had it, cannot release multi-host slices)"
)
"""What replaced the idle timeout, for the error of a config or argument that still sets it."""


class RayTpuClusterArgs(TypedDict):
    """Inputs of RayTpuCluster."""

    workload_identity: GcsWorkloadIdentityRef
    """The GcsWorkloadIdentity the Ray pods use: they run as its service account, in its namespace, and mount its bucket at /data through GCS FUSE (for the code archive and the compilation cache; runs write checkpoints to gs://<bucket>/ directly). From Python, the component itself; from other languages, its fields."""
    ray_cluster_name: NotRequired[str]
    """RayCluster name; the head Service is <name>-head-svc. Default: maxtext-tpu-cluster."""
    generation: NotRequired[str]
    """TPU generation of the slices. Default: v6e."""
    topology: NotRequired[str]
    """Slice topology. Default: 4x4."""
    num_slices: NotRequired[int]
    """Slices: the TPU worker group's replicas and MEGASCALE_NUM_SLICES. Default: 2."""
    elastic_min_slices: NotRequired[int]
    """Fewest slices an elastic job keeps training on, and the default of the MaxTextRuns on it; also the TPU worker group's minReplicas: the RayCluster's, or where the slices scale to zero that of each run's own cluster (an elastic run's: its own minimum), never 0. Default: num_slices."""
    dcn_interfaces: NotRequired[int]
    """DCN NICs each TPU worker pod claims through DRANET (0: none). Default: what the generation's hosts offer (2 on v6e)."""
    image: NotRequired[pulumi.Input[str]]
    """Image of the head and the workers: a WorkerImage (its ref: the lock installed, pinned by digest), or a reference. Default: rayproject/ray:2.60.0-py312, Ray's release image of the driver's Ray, on which the TPU workers install the lock at start. A moving tag (nightly, latest) is pulled on every start and gets a preview warning."""
    megascale_port: NotRequired[int]
    """MEGASCALE_PORT of the workers. Default: 9915, as in the tutorial."""
    compute_class: NotRequired[str]
    """Autopilot: name of the ComputeClass created here to provision the TPU nodes with DRANET."""
    capacity: NotRequired[str]
    """How the slices' VMs are obtained (on-demand, spot, flex-start, reservation); Spot and flex-start slices are selected by their node label. Default: on-demand."""
    scale_to_zero: NotRequired[bool]
    """No long-lived RayCluster: every run is a RayJob that brings its own cluster (ray_cluster_spec) and deletes it when the run ends, so the slices exist only while a run does. Default: true for flex-start (required), false otherwise, as the node pools'."""


class RayTpuClusterRef(TypedDict):
    """What a job needs of a RayTpuCluster: the RayCluster to run on, its bucket, slices and capacity. From Python, pass the RayTpuCluster itself. The provider cannot pass a component between languages (a reference arrives as its URN only), so other languages set these fields: rayClusterName and bucketName from outputs, so that the job waits for the RayCluster and the bucket, and the others as given to the RayTpuCluster, with its defaults resolved."""

    ray_cluster_name: pulumi.Input[str]
    """The RayCluster (RayTpuCluster's rayClusterName)."""
    namespace: str
    """The RayCluster's namespace."""
    bucket_name: pulumi.Input[str]
    """The bucket its pods mount at /data (GcsWorkloadIdentity's bucketName)."""
    generation: str
    """TPU generation of its slices."""
    topology: str
    """Topology of its slices."""
    num_slices: int
    """Its slices (the TPU worker group's replicas)."""
    elastic_min_slices: int
    """Fewest slices it keeps for an elastic job (the TPU worker group's minReplicas, its RayCluster's or each run's own cluster's)."""
    capacity: str
    """How its slices' VMs are obtained."""
    scale_to_zero: bool
    """Whether it scales its slices to zero: a run then brings its own RayCluster and waits minutes for its slices."""
    ray_cluster_spec: NotRequired[pulumi.Input[Mapping[str, Any]]]
    """With scale_to_zero: the RayCluster spec each run brings in its RayJob (RayTpuCluster's rayClusterSpec)."""
    dcn_interfaces: NotRequired[int]
    """DCN NICs each TPU worker pod claims, which a TpuQueue counts. Default: what the generation's hosts offer, as RayTpuCluster's."""
    compute_class: NotRequired[str]
    """Autopilot: its ComputeClass (a TpuQueue refuses Autopilot's DCN claim, which Kueue cannot count)."""


def check_image(image: object, key: str) -> str:
    """An image reference the kubelet can pull (an empty one leaves every Ray pod unstartable)."""
    if not isinstance(image, str) or not _IMAGE.fullmatch(image):
        raise ConfigError(key, image, f"an image reference such as {DEFAULT_IMAGE}")
    return image


def check_megascale_port(port: object, key: str) -> int:
    """MEGASCALE_PORT: a port the TPU workers' JAX can bind, so none that Ray may hold on the same pod."""
    number = MEGASCALE_PORT.check(port, key)
    use = port_use(number)
    if use is not None:
        fixed = ", ".join(str(p) for p in sorted(POD_PORTS))
        raise ConfigError(
            key, port,
            f"a port the Ray pods leave free ({number} is {use}): {MEGASCALE_PORT.low}-{RAY_RANDOM_PORTS.start - 1} "
            f"except {fixed} and {RAY_WORKER_PORTS.start}-{RAY_WORKER_PORTS.stop - 1}",
        )
    return number


def pods_image(image: object, key: str) -> Any:
    """What the pods run: a WorkerImage's ``ref`` (its tag and digest, known once pushed), a reference the stack
    computes (an Output, taken as such), or a reference as written, checked. The component is known by its ``ref``
    Output, not imported: the provider host hosts this component without pulumi-docker-build."""
    ref = getattr(image, "ref", None) if isinstance(image, pulumi.ComponentResource) else image
    return ref if isinstance(ref, pulumi.Output) else check_image(image, key)


def spec_from_args(args: RayTpuClusterArgs, prefix: str = "RayTpuClusterArgs.") -> RayClusterSpec:
    """The pure RayCluster spec, after every rule on the arguments."""
    if "idle_timeout_s" in args:
        raise ConfigError(
            f"{prefix}idle_timeout_s", args["idle_timeout_s"],  # type: ignore[typeddict-item]
            f"unset: {IDLE_TIMEOUT_RETIRED}",
        )
    shape = slice_shape(
        args.get("generation", DEFAULT_GENERATION), args.get("topology", DEFAULT_TOPOLOGY), key=f"{prefix}topology", generation_key=f"{prefix}generation"
    )
    name = args.get("ray_cluster_name", DEFAULT_NAME)
    (RAY_TPU_CLUSTER_NAME if shape.multi_host else RAY_CLUSTER_NAME).check(name, f"{prefix}ray_cluster_name")
    num_slices = NUM_SLICES.check(args.get("num_slices", DEFAULT_NUM_SLICES), f"{prefix}num_slices")
    min_slices = elastic_min_slices(args.get("elastic_min_slices"), num_slices, f"{prefix}elastic_min_slices")
    nics = shape.generation.dcn_nics_per_host
    dcn_interfaces = Bounds(0, nics).check(args.get("dcn_interfaces", nics), f"{prefix}dcn_interfaces")
    identity = resolve_ref(args["workload_identity"], GcsWorkloadIdentity, f"{prefix}workload_identity")
    namespace = DNS_LABEL.check(identity["namespace"], f"{prefix}workload_identity.namespace")
    if isinstance(identity["ksa_name"], str):
        DNS_SUBDOMAIN.check(identity["ksa_name"], f"{prefix}workload_identity.ksa_name")
    capacity = capacity_mode(args.get("capacity", DEFAULT_CAPACITY), f"{prefix}capacity")
    if "compute_class" in args:
        DNS_LABEL.check(args["compute_class"], f"{prefix}compute_class")
        check_autopilot_capacity(capacity.name, f"{prefix}capacity")
    return RayClusterSpec(
        name=name,
        namespace=namespace,
        service_account=identity["ksa_name"],
        bucket_name=identity["bucket_name"],
        shape=shape,
        num_slices=num_slices,
        elastic_min_slices=min_slices,
        dcn_interfaces=dcn_interfaces,
        image=pods_image(args.get("image", DEFAULT_IMAGE), f"{prefix}image"),
        megascale_port=check_megascale_port(args.get("megascale_port", DEFAULT_MEGASCALE_PORT), f"{prefix}megascale_port"),
        compute_class=args.get("compute_class"),
        capacity=capacity,
        scale_to_zero=capacity.scale_to_zero(args.get("scale_to_zero")),
    )


def cluster_ref(
    spec: RayClusterSpec, ray_cluster_name: pulumi.Input[str], run_cluster_spec: Optional[pulumi.Input[Mapping]] = None
) -> RayTpuClusterRef:
    """What a job sees of the RayCluster of ``spec``, named by ``ray_cluster_name`` (the resource's output, or
    the plain name for checks made before it exists); ``run_cluster_spec``: what a run brings on a cluster that
    scales to zero (the component's output, or :func:`ray_cluster_spec` of ``spec`` before it exists)."""
    per_run = {"ray_cluster_spec": run_cluster_spec} if spec.scale_to_zero else {}
    return RayTpuClusterRef(
        ray_cluster_name=ray_cluster_name,
        namespace=spec.namespace,
        bucket_name=spec.bucket_name,
        generation=spec.shape.generation.name,
        topology=spec.shape.topology,
        num_slices=spec.num_slices,
        elastic_min_slices=spec.elastic_min_slices,
        capacity=spec.capacity.name,
        scale_to_zero=spec.scale_to_zero,
        dcn_interfaces=spec.dcn_interfaces,
        **per_run,
        **({"compute_class": spec.compute_class} if spec.compute_class else {}),
    )


class RayTpuCluster(pulumi.ComponentResource):
    """A RayCluster with one TPU worker group whose replicas are slices, long-lived or one per run.

    Needs a Kubernetes provider for a cluster that has the GKE Ray operator
    add-on (KubeRay >= 1.4 and its TPU webhook), passed with opts providers.
    numOfHosts is the slice's host count and google.com/tpu its chips per host,
    both from the TPU catalogue, which is exactly what the TPU webhook checks
    before admitting the RayCluster. MaxTextRun takes it as ray_cluster.
    """

    ray_cluster_name: pulumi.Output[str]
    """The RayCluster's name (known once it exists). With scale_to_zero no RayCluster has it: a run's cluster is named <RayJob>-<5 random characters> by KubeRay."""
    head_service: pulumi.Output[str]
    """The head Service KubeRay creates: the dashboard and Jobs API, ClusterIP only. With scale_to_zero, a run's is <its cluster>-head-svc."""
    dashboard_port: pulumi.Output[int]
    """The dashboard / Jobs API port of the head Service."""
    ray_cluster_spec: pulumi.Output[Optional[Mapping[str, Any]]]
    """With scale_to_zero: the spec of the RayCluster each run brings (a RayJob's rayClusterSpec), known once what its pods need exists. Otherwise null."""

    def __init__(self, name: str, args: RayTpuClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        spec = spec_from_args(args)
        super().__init__("gke-ray-tpu:index:RayTpuCluster", name, None, opts)
        self.spec = spec
        prerequisites = self._prerequisites(name, spec, child_options(self, opts))
        self.ray_cluster = None
        if spec.scale_to_zero:
            # No RayCluster: the spec is known once the claim template and ComputeClass it names exist (and the
            # identity and bucket whose outputs are in it), so a run waits for those through it.
            self.ray_cluster_spec = pulumi.Output.all(
                pulumi.Output.from_input(ray_cluster_spec(spec)), *(p.urn for p in prerequisites)
            ).apply(lambda resolved: resolved[0])
            ready: pulumi.Output = self.ray_cluster_spec
        else:
            self.ray_cluster = custom_resource(
                f"{name}-raycluster", ray_cluster(spec), child_options(self, opts, depends_on=prerequisites)
            )
            self.ray_cluster_spec = pulumi.Output.from_input(None)
            ready = self.ray_cluster.urn
        # Tied to the resource so consumers of the name wait for the RayCluster to exist.
        self.ray_cluster_name = ready.apply(lambda _: spec.name)
        self.head_service = pulumi.Output.from_input(spec.head_service)
        self.dashboard_port = pulumi.Output.from_input(DASHBOARD_PORT)
        self.ref = cluster_ref(spec, self.ray_cluster_name, self.ray_cluster_spec)
        self.register_outputs(
            {
                "rayClusterName": self.ray_cluster_name,
                "headService": self.head_service,
                "dashboardPort": self.dashboard_port,
                "rayClusterSpec": self.ray_cluster_spec,
            }
        )

    def _prerequisites(self, name: str, spec: RayClusterSpec, child: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        """What a Ray pod of the cluster needs before it exists: its DCN claim template and ComputeClass, and the
        NetworkPolicy over it."""
        self.claim_template = None
        if spec.dcn_interfaces:
            self.claim_template = typed_resource(
                k8s.resource.v1.ResourceClaimTemplate, f"{name}-netdev-claim", resource_claim_template(spec), child
            )
        self.compute_class = None
        if spec.compute_class:
            self.compute_class = custom_resource(f"{name}-compute-class", compute_class(spec), child)
        # Before any Ray pod exists, so no pod of the stack ever runs unguarded (enforced with Dataplane V2);
        # it selects the pods of the long-lived RayCluster and of every run's own cluster alike.
        self.network_policy = typed_resource(
            k8s.networking.v1.NetworkPolicy, f"{name}-ray-ingress", network_policy(spec), child
        )
        return [r for r in (self.claim_template, self.compute_class, self.network_policy) if r is not None]


def served_kuberay(name: str, cluster_name: str, key: str, own_clusters: bool,
                   opts: pulumi.ResourceOptions) -> pulumi.Output[pulumi.Resource]:
    """Read the RayCluster and RayJob CRDs the cluster serves and fail unless its KubeRay keeps every field the
    stack sets: token auth (>= 1.5.1) and the workers' DCN claim (>= 1.4) and, where runs bring their own cluster
    (``own_clusters``), the RayJob's ``preRunningDeadlineSeconds`` (>= 1.6.0). On an existing cluster
    ``pulumi preview`` reads them; on a new one the read waits for the cluster, in ``pulumi up``.

    Pass the result in ``depends_on`` of the RayTpuCluster and of every MaxTextRun: nothing of the stack's Ray is
    created on a cluster that would drop those fields and run it open (or let a run wait for ever). ``cluster_name``
    and ``key``: the cluster and the setting an error names."""
    reads = [k8s.apiextensions.v1.CustomResourceDefinition.get(f"{name}-{crd.split('.')[0]}", crd, opts=opts)
             for crd in (RAYCLUSTER_CRD, RAYJOB_CRD)]

    def problems_of(crd: str, problems: Callable[[dict], list[str]]) -> Callable[[Any], list[str]]:
        def found(spec) -> list[str]:
            # The SDK's output types key their own fields in snake_case; of those the check reads only the schema's.
            served = {"spec": {"versions": [
                {**v, "schema": {"openAPIV3Schema": (v.get("schema") or {}).get("open_apiv3_schema") or {}}}
                for v in spec.get("versions") or []]}}
            return [f"its {crd} CRD {problem}" for problem in problems(served)]
        return found

    def check(found: list[list[str]]) -> pulumi.Resource:
        raycluster, rayjob = found
        problems = raycluster + (rayjob if own_clusters else [])
        if problems:
            floor = MIN_KUBERAY_OWN_CLUSTERS if own_clusters else MIN_KUBERAY_AUTH
            raise ConfigError(key, cluster_name, f"a cluster whose Ray operator add-on runs KubeRay >= {floor}: "
                              + "; ".join(problems))
        return reads[-1]

    # Each CRD comes down to its problems before the two are joined: Output.all unwraps its inputs' values deeply,
    # an Output per node of a CRD's schema (bench/bench_crd_read.py).
    found = [read.spec.apply(problems_of(crd, problems)) for read, crd, problems in
             zip(reads, (RAYCLUSTER_CRD, RAYJOB_CRD), (served_crd_problems, served_rayjob_problems))]
    return pulumi.Output.all(*found).apply(check)
