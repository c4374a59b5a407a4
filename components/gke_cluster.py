"""GkeRayCluster: a GKE cluster ready for KubeRay on TPUs, or an existing one adopted after a check."""

from typing import NotRequired, Optional, TypedDict

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from gke_ray_tpu.components._options import child_options, replaced_in_place
from gke_ray_tpu.core.bounds import Bounds
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.gke import (
    CLUSTER_MODES,
    RELEASE_CHANNELS,
    ClusterFacts,
    check_dranet_floor,
    missing_for_ray_on_tpus,
    newest,
    parse_version,
)
from gke_ray_tpu.core.naming import GKE_NAME

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
CPU_POOL_NAME = "ray-head-pool"
SYSTEM_POOL_NAME = "system-pool"
SYSTEM_MACHINE_TYPE = "e2-medium"
"""The system pool of a cluster that scales to zero: GKE's default node machine type, and the one node GKE's
cluster autoscaler needs ("at least one node must always be available in the cluster to run system Pods",
GKE: About cluster autoscaling, cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler). Too small
for a Ray head (8 CPUs), so no head is ever placed there."""
SYSTEM_NODE_COUNT = 1

DEFAULT_MODE = "standard"
DEFAULT_VERSION = "1.35"
"""The newest 1.35 patch of the release channel: 1.35 holds both DRANET minimums, and a minor
keeps working when the channel drops the patch an exact pin would name."""
DEFAULT_RELEASE_CHANNEL = "RAPID"
DEFAULT_CPU_MACHINE_TYPE = "n1-standard-16"
DEFAULT_CPU_NODE_COUNT = 3
CPU_NODE_COUNT = Bounds(1, 1000)
"""``cpuNodeCount`` (``cpu_node_count``): nodes of the CPU pool, or the most it autoscales to with scale to zero."""
DEFAULT_RAY_CLUSTER_LOGGING = True
"""Ray's logs go to Cloud Logging and outlive the RayCluster: a run's log is tens of MB (billed past 50 GiB a month)."""
DEFAULT_RAY_CLUSTER_MONITORING = True
"""Ray's metrics go to Managed Service for Prometheus (billed per sample): cents a day next to the TPUs' dollars an hour."""
DEFAULT_IMAGE_STREAMING = True
"""GKE image streaming on every node pool of the stack: a container whose image is in Artifact Registry starts
before its image is pulled whole. Needs the Container File System API (containerfilesystem.googleapis.com)
enabled in the project; no charge of its own (docs/image.md)."""


class GkeRayClusterArgs(TypedDict):
    """Inputs of GkeRayCluster."""

    cluster_name: str
    """Name of the cluster to create, or of the existing cluster when existing is true."""
    location: str
    """Zone (a zonal Standard cluster, as in the tutorial) or region (Autopilot, regional Standard)."""
    project: str
    """Project ID; also names the Workload Identity pool <project>.svc.id.goog."""
    mode: NotRequired[str]
    """standard or autopilot. Default: standard."""
    version: NotRequired[str]
    """A GKE minor such as 1.35 (the channel's newest patch of it; the default) or an exact version such as 1.35.2-gke.1842000. Checked at preview against the versions GKE offers in the location and against the DRANET minimum."""
    release_channel: NotRequired[str]
    """UNSPECIFIED (Standard only), RAPID, REGULAR, STABLE or EXTENDED. Default: RAPID, where DRANET versions ship first."""
    deletion_protection: NotRequired[bool]
    """Refuse pulumi destroy of the cluster until this is set to false and applied. Default: true."""
    cpu_machine_type: NotRequired[str]
    """Machine type of the CPU pool that hosts the Ray head and system pods (Standard only). Default: n1-standard-16."""
    cpu_node_count: NotRequired[int]
    """Nodes in the CPU pool (Standard only), 1 to 1000; with scale_to_zero the most it autoscales to (a Ray head per node, one per running run). Default: 3, what gcloud's default pool gets."""
    scale_to_zero: NotRequired[bool]
    """Standard only: the CPU pool autoscales from 0 (a Ray head exists only while a run does) and one e2-medium node in a system pool runs GKE's system pods. Default: false (a fixed CPU pool hosts both)."""
    enable_multi_networking: NotRequired[bool]
    """GKE multi-networking. Default: false, as in the tutorial (DRANET does not need it)."""
    ray_cluster_logging: NotRequired[bool]
    """The Ray operator add-on sends every RayCluster's logs to Cloud Logging, where they outlive the cluster (billed per GiB ingested past the free allotment). Default: true."""
    ray_cluster_monitoring: NotRequired[bool]
    """The Ray operator add-on sends every RayCluster's metrics to Managed Service for Prometheus (billed per sample ingested). Default: true."""
    image_streaming: NotRequired[bool]
    """GKE image streaming (gcfs) on the CPU pools and as the cluster's node pool default (Standard; Autopilot streams by default): images in Artifact Registry start before they are pulled whole. Needs the Container File System API enabled. Default: true."""
    dranet: NotRequired[bool]
    """Whether the TPU slices get DCN NICs from GKE-managed DRANET, which sets a minimum GKE version. Default: true."""
    existing: NotRequired[bool]
    """Adopt cluster_name instead of creating it: checked for what Ray on TPUs needs, then only a Kubernetes provider is created. Default: false."""


def check_release_channel(mode: str, channel: str, key: str) -> None:
    if channel not in RELEASE_CHANNELS:
        raise ConfigError(key, channel, f"one of {', '.join(RELEASE_CHANNELS)}")
    if mode == "autopilot" and channel == "UNSPECIFIED":
        raise ConfigError(key, channel, "a channel: Autopilot clusters always have one")


def check_args(args: GkeRayClusterArgs, prefix: str = "GkeRayClusterArgs.") -> None:
    """The rules on the arguments alone (no lookup); ``prefix`` + field name is the error key."""
    mode = args.get("mode", DEFAULT_MODE)
    channel = args.get("release_channel", DEFAULT_RELEASE_CHANNEL)
    if mode not in CLUSTER_MODES:
        raise ConfigError(f"{prefix}mode", mode, f"one of {', '.join(CLUSTER_MODES)}")
    check_release_channel(mode, channel, f"{prefix}release_channel")
    GKE_NAME.check(args["cluster_name"], f"{prefix}cluster_name")
    version = parse_version(args.get("version", DEFAULT_VERSION), f"{prefix}version")
    if args.get("dranet", True) and not args.get("existing", False):
        check_dranet_floor(mode, version, f"{prefix}version")
    CPU_NODE_COUNT.check(args.get("cpu_node_count", DEFAULT_CPU_NODE_COUNT), f"{prefix}cpu_node_count")


def resolve_version(args: GkeRayClusterArgs, key: str = "GkeRayClusterArgs.version") -> str:
    """The patch GKE would create now, after checking its release channel offers it (getEngineVersions invokes).

    Asked with a version as prefix, GKE's server config names each channel's
    newest matching version: for a minor (``1.35.``) the patch GKE's "1.X"
    alias picks in that channel; for an exact pin, the pin itself while the
    channel still offers it.
    """
    version = parse_version(args.get("version", DEFAULT_VERSION), key)
    channel = args.get("release_channel", DEFAULT_RELEASE_CHANNEL)
    where = f"the {channel} channel in {args['location']}" if channel != "UNSPECIFIED" else args["location"]

    def offered(prefix: str) -> Optional[str]:
        found = gcp.container.get_engine_versions(location=args["location"], project=args["project"], version_prefix=prefix)
        if channel == "UNSPECIFIED":
            return newest(found.valid_master_versions or [])
        return (found.release_channel_latest_version or {}).get(channel)

    chosen = offered(version.lookup_prefix)
    if chosen is None:
        minor = f"{version.major}.{version.minor}"
        if version.is_minor:
            raise ConfigError(key, str(version), f"a minor {where} offers ({minor} is not offered there)")
        alternative = offered(f"{minor}.")
        instead = f"its newest {minor} is {alternative}" if alternative else f"it offers no {minor} at all"
        raise ConfigError(
            key, str(version),
            f"a version {where} offers ({version} was dropped or never offered; {instead}); "
            f"the minor {minor} follows the channel",
        )
    if args.get("dranet", True):
        check_dranet_floor(args.get("mode", DEFAULT_MODE), parse_version(chosen, key), key)
    return chosen


def check_existing(args: GkeRayClusterArgs, key: str = "GkeRayClusterArgs.cluster_name") -> gcp.container.AwaitableGetClusterResult:
    """Read the existing cluster (an invoke of getCluster) and refuse it if it lacks what the stack relies on."""
    found = gcp.container.get_cluster(name=args["cluster_name"], location=args["location"], project=args["project"])
    addons = (found.addons_configs or [None])[0]
    identity = (found.workload_identity_configs or [None])[0]

    def enabled(configs) -> bool:
        return bool(configs) and bool(configs[0].enabled)

    facts = ClusterFacts(
        name=args["cluster_name"],
        autopilot=bool(found.enable_autopilot),
        datapath_provider=found.datapath_provider or "",
        workload_pool=(identity.workload_pool if identity else "") or "",
        ray_operator=addons is not None and enabled(addons.ray_operator_configs),
        gcs_fuse_csi=addons is not None and enabled(addons.gcs_fuse_csi_driver_configs),
        master_version=found.master_version or "",
    )
    missing = missing_for_ray_on_tpus(
        facts, args["project"], args.get("mode", DEFAULT_MODE), dranet=args.get("dranet", True)
    )
    if missing:
        raise ConfigError(key, args["cluster_name"], "an existing cluster with " + "; ".join(missing))
    return found


class GkeRayCluster(pulumi.ComponentResource):
    """A GKE cluster with the Ray operator, GCS FUSE CSI, Dataplane V2 and Workload Identity.

    Exposes provider, a Kubernetes provider that authenticates with the
    gke-gcloud-auth-plugin exec credential (no static token or key), for the
    components that create Kubernetes objects in the cluster, and cluster, the
    gcp.container.Cluster the TPU node pools join. Everything is checked before
    anything is registered: the arguments, then (preview included) the version
    GKE offers or the existing cluster's add-ons, datapath, identity pool and version.
    """

    cluster: gcp.container.Cluster
    """The GKE cluster (created, or read when existing is true), for TpuSliceNodePool's cluster."""
    cluster_name: pulumi.Output[str]
    """The cluster's name."""
    location: pulumi.Output[str]
    """The cluster's zone or region."""
    endpoint: pulumi.Output[str]
    """The control plane's IP address."""
    kubeconfig: pulumi.Output[str]
    """A kubeconfig whose user runs gke-gcloud-auth-plugin: no credential in it."""
    version: pulumi.Output[str]
    """The GKE version the cluster is created at (as offered at preview), or runs at when existing."""
    provider: k8s.Provider
    """A Kubernetes provider for the cluster, for RayTpuCluster, GcsWorkloadIdentity and MaxTextRun."""

    def __init__(self, name: str, args: GkeRayClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        check_args(args)
        existing = bool(args.get("existing", False))
        found = check_existing(args) if existing else None
        version = found.master_version if found else resolve_version(args)
        super().__init__("gke-ray-tpu:index:GkeRayCluster", name, None, opts)
        child = child_options(self, opts)
        self.cpu_pool = None
        self.system_pool = None

        if found is not None:
            cluster = gcp.container.Cluster.get(
                f"{name}-cluster",
                id=f"projects/{args['project']}/locations/{args['location']}/clusters/{args['cluster_name']}",
                opts=pulumi.ResourceOptions(parent=self),
            )
            endpoint = pulumi.Output.from_input(found.endpoint)
            ca_certificate = pulumi.Output.from_input(found.master_auths[0].cluster_ca_certificate)
            ready = []
        else:
            cluster = _create_cluster(name, args, child)
            endpoint = cluster.endpoint
            ca_certificate = cluster.master_auth.cluster_ca_certificate
            if args.get("mode", DEFAULT_MODE) == "standard":
                self.cpu_pool = _create_cpu_pool(name, args, cluster, child)
                if args.get("scale_to_zero", False):
                    self.system_pool = _create_system_pool(name, args, cluster, child)
            # Kubernetes objects need a schedulable cluster, not just a control plane.
            ready = [r for r in (cluster, self.cpu_pool, self.system_pool) if r is not None]

        self.cluster = cluster
        self.cluster_name = pulumi.Output.from_input(args["cluster_name"]) if found else cluster.name
        self.location = pulumi.Output.from_input(args["location"]) if found else cluster.location
        self.endpoint = endpoint
        self.version = pulumi.Output.from_input(version)
        self.kubeconfig = pulumi.Output.all(self.cluster_name, self.endpoint, ca_certificate).apply(
            lambda values: gke_kubeconfig(*values)
        )
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig, opts=child_options(self, opts, depends_on=ready)
        )
        self.register_outputs(
            {
                "clusterName": self.cluster_name,
                "location": self.location,
                "endpoint": self.endpoint,
                "version": self.version,
                "kubeconfig": self.kubeconfig,
            }
        )


def _create_cluster(name: str, args: GkeRayClusterArgs, child: pulumi.ResourceOptions) -> gcp.container.Cluster:
    autopilot = args.get("mode", DEFAULT_MODE) == "autopilot"
    standard_only = {} if autopilot else {
        # Standard: drop GKE's default pool and manage the CPU pool explicitly,
        # so its size and machine type are reviewed in `pulumi preview`.
        "remove_default_node_pool": True,
        "initial_node_count": 1,
        "datapath_provider": "ADVANCED_DATAPATH",
        "enable_multi_networking": args.get("enable_multi_networking", False) or None,
        # The default of node pools made outside the stack; the stack's own pools state it themselves.
        "node_pool_defaults": gcp.container.ClusterNodePoolDefaultsArgs(
            node_config_defaults=gcp.container.ClusterNodePoolDefaultsNodeConfigDefaultsArgs(
                gcfs_config=gcp.container.ClusterNodePoolDefaultsNodeConfigDefaultsGcfsConfigArgs(
                    enabled=args.get("image_streaming", DEFAULT_IMAGE_STREAMING)
                )
            )
        ),
    }
    return gcp.container.Cluster(
        f"{name}-cluster",
        name=args["cluster_name"],
        project=args["project"],
        location=args["location"],
        # `False` here conflicts with remove_default_node_pool (pulumi-gcp#2881): only ever True or unset.
        enable_autopilot=True if autopilot else None,
        min_master_version=args.get("version", DEFAULT_VERSION),
        release_channel=gcp.container.ClusterReleaseChannelArgs(
            channel=args.get("release_channel", DEFAULT_RELEASE_CHANNEL)
        ),
        deletion_protection=args.get("deletion_protection", True),
        addons_config=gcp.container.ClusterAddonsConfigArgs(
            ray_operator_configs=[_ray_operator(args)],
            gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
        ),
        workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
            workload_pool=f"{args['project']}.svc.id.goog"
        ),
        **standard_only,
        opts=child,
    )


def _ray_operator(args: GkeRayClusterArgs) -> gcp.container.ClusterAddonsConfigRayOperatorConfigArgs:
    container = gcp.container
    return container.ClusterAddonsConfigRayOperatorConfigArgs(
        enabled=True,
        ray_cluster_logging_config=container.ClusterAddonsConfigRayOperatorConfigRayClusterLoggingConfigArgs(
            enabled=args.get("ray_cluster_logging", DEFAULT_RAY_CLUSTER_LOGGING)
        ),
        ray_cluster_monitoring_config=container.ClusterAddonsConfigRayOperatorConfigRayClusterMonitoringConfigArgs(
            enabled=args.get("ray_cluster_monitoring", DEFAULT_RAY_CLUSTER_MONITORING)
        ),
    )


def _create_cpu_pool(
    name: str, args: GkeRayClusterArgs, cluster: gcp.container.Cluster, child: pulumi.ResourceOptions
) -> gcp.container.NodePool:
    """The Ray heads' pool: fixed, or from 0 to cpu_node_count when each run brings its own head."""
    nodes = int(args.get("cpu_node_count", DEFAULT_CPU_NODE_COUNT))
    scaled = bool(args.get("scale_to_zero", False))
    return _cpu_node_pool(
        f"{name}-cpu-pool", CPU_POOL_NAME, args, cluster, child, args.get("cpu_machine_type", DEFAULT_CPU_MACHINE_TYPE),
        # As for the TPU pools: node_count for a fixed pool; an autoscaled one starts empty and the autoscaler owns its count.
        node_count=None if scaled else nodes,
        initial_node_count=0 if scaled else None,
        autoscaling=gcp.container.NodePoolAutoscalingArgs(min_node_count=0, max_node_count=nodes) if scaled else None,
    )


def _create_system_pool(
    name: str, args: GkeRayClusterArgs, cluster: gcp.container.Cluster, child: pulumi.ResourceOptions
) -> gcp.container.NodePool:
    """The node GKE's system pods keep while every other pool is at 0."""
    return _cpu_node_pool(
        f"{name}-system-pool", SYSTEM_POOL_NAME, args, cluster, child, SYSTEM_MACHINE_TYPE, node_count=SYSTEM_NODE_COUNT
    )


def _cpu_node_pool(
    resource_name: str, pool_name: str, args: GkeRayClusterArgs, cluster: gcp.container.Cluster,
    child: pulumi.ResourceOptions, machine_type: str, **counts,
) -> gcp.container.NodePool:
    return gcp.container.NodePool(
        resource_name,
        name=pool_name,
        project=args["project"],
        cluster=cluster.name,
        location=args["location"],
        node_config=gcp.container.NodePoolNodeConfigArgs(
            machine_type=machine_type,
            oauth_scopes=[CLOUD_PLATFORM_SCOPE],
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
            gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=args.get("image_streaming", DEFAULT_IMAGE_STREAMING)),
        ),
        management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
        # Switching scaleToZero sets or drops initial_node_count, which GKE cannot change in place.
        opts=replaced_in_place(child),
        **counts,
    )


def gke_kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that gets short-lived tokens from gke-gcloud-auth-plugin at each use."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {cluster_name}
  cluster:
    server: https://{endpoint}
    certificate-authority-data: {ca_certificate}
contexts:
- name: {cluster_name}
  context:
    cluster: {cluster_name}
    user: {cluster_name}
current-context: {cluster_name}
users:
- name: {cluster_name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      installHint: Install gke-gcloud-auth-plugin (gcloud components install gke-gcloud-auth-plugin).
      provideClusterInfo: true
"""
