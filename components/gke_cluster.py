"""GkeRayCluster: a GKE cluster ready for KubeRay on TPUs, or an existing one adopted as is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components._options import child_options
from components.errors import ConfigError
from components.stack_config import CLUSTER_MODES, DRANET_MIN_VERSION, RELEASE_CHANNELS, parse_gke_version

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


@dataclass
class GkeRayClusterArgs:
    """Inputs of :class:`GkeRayCluster`."""

    cluster_name: str
    """Name of the cluster to create, or of the existing cluster when ``existing`` is true."""
    location: str
    """Zone (zonal Standard cluster, as in the tutorial) or region (Autopilot, regional Standard)."""
    project: str
    """Project ID; also names the Workload Identity pool ``<project>.svc.id.goog``."""
    mode: str = "standard"
    """``standard`` or ``autopilot``."""
    version: str = DRANET_MIN_VERSION["autopilot"]
    """Pinned minimum control-plane version; default 1.35.2-gke.1842000 (the tutorial's)."""
    release_channel: str = "RAPID"
    """Release channel; RAPID by default because fresh DRANET versions ship there first."""
    deletion_protection: bool = True
    """Refuse ``pulumi destroy`` of the cluster until this is set to false and applied."""
    cpu_machine_type: str = "n1-standard-16"
    """Machine type of the CPU pool that hosts the Ray head and system pods (Standard only)."""
    cpu_node_count: int = 3
    """Nodes in the CPU pool (Standard only); 3 is what gcloud's default pool gets."""
    enable_multi_networking: bool = False
    """GKE multi-networking; off as in the tutorial (DRANET does not need it)."""
    existing: bool = False
    """Adopt ``cluster_name`` instead of creating it: only a Kubernetes provider is created."""


class GkeRayCluster(pulumi.ComponentResource):
    """A GKE cluster with the Ray operator, GCS FUSE CSI, Dataplane V2 and Workload Identity.

    Exposes :attr:`provider`, a Kubernetes provider that authenticates with the
    ``gke-gcloud-auth-plugin`` exec credential (no static token or key), for the
    components that create Kubernetes objects in the cluster.
    """

    name: pulumi.Output[str]
    location: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    provider: k8s.Provider
    cluster: Optional[gcp.container.Cluster]
    cpu_pool: Optional[gcp.container.NodePool]

    def __init__(self, name: str, args: GkeRayClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        _check_args(name, args)
        super().__init__("gke-ray-tpu:index:GkeRayCluster", name, None, opts)
        child = child_options(self, opts)
        self.cluster = None
        self.cpu_pool = None

        if args.existing:
            found = gcp.container.get_cluster_output(
                name=args.cluster_name, location=args.location, project=args.project, opts=pulumi.InvokeOptions(parent=self)
            )
            self.name = found.name
            self.location = found.location
            self.endpoint = found.endpoint
            ca_certificate = found.master_auths.apply(lambda auths: auths[0].cluster_ca_certificate)
        else:
            self.cluster = _create_cluster(name, args, child)
            self.name = self.cluster.name
            self.location = self.cluster.location
            self.endpoint = self.cluster.endpoint
            ca_certificate = self.cluster.master_auth.cluster_ca_certificate
            if args.mode == "standard":
                self.cpu_pool = _create_cpu_pool(name, args, self.cluster, child)

        self.kubeconfig = pulumi.Output.all(self.name, self.endpoint, ca_certificate).apply(
            lambda values: gke_kubeconfig(*values)
        )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # Kubernetes objects need a schedulable cluster, not just a control plane.
            opts=child_options(self, opts, depends_on=[r for r in (self.cluster, self.cpu_pool) if r is not None]),
        )
        self.register_outputs({"name": self.name, "location": self.location, "endpoint": self.endpoint})


def _check_args(name: str, args: GkeRayClusterArgs) -> None:
    if args.mode not in CLUSTER_MODES:
        raise ConfigError(f"{name}.mode", args.mode, f"one of {', '.join(CLUSTER_MODES)}")
    if args.release_channel not in RELEASE_CHANNELS:
        raise ConfigError(f"{name}.release_channel", args.release_channel, f"one of {', '.join(RELEASE_CHANNELS)}")
    if args.mode == "autopilot" and args.release_channel == "UNSPECIFIED":
        raise ConfigError(f"{name}.release_channel", args.release_channel, "a channel: Autopilot clusters always have one")
    parse_gke_version(args.version, f"{name}.version")


def _create_cluster(name: str, args: GkeRayClusterArgs, child: pulumi.ResourceOptions) -> gcp.container.Cluster:
    autopilot = args.mode == "autopilot"
    standard_only = {} if autopilot else {
        # Standard: drop GKE's default pool and manage the CPU pool explicitly,
        # so its size and machine type are reviewed in `pulumi preview`.
        "remove_default_node_pool": True,
        "initial_node_count": 1,
        "datapath_provider": "ADVANCED_DATAPATH",
        "enable_multi_networking": args.enable_multi_networking or None,
    }
    return gcp.container.Cluster(
        f"{name}-cluster",
        name=args.cluster_name,
        project=args.project,
        location=args.location,
        # `False` here conflicts with remove_default_node_pool (pulumi-gcp#2881): only ever True or unset.
        enable_autopilot=True if autopilot else None,
        min_master_version=args.version,
        release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.release_channel),
        deletion_protection=args.deletion_protection,
        addons_config=gcp.container.ClusterAddonsConfigArgs(
            ray_operator_configs=[gcp.container.ClusterAddonsConfigRayOperatorConfigArgs(enabled=True)],
            gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
        ),
        workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
            workload_pool=f"{args.project}.svc.id.goog"
        ),
        **standard_only,
        opts=child,
    )


def _create_cpu_pool(
    name: str, args: GkeRayClusterArgs, cluster: gcp.container.Cluster, child: pulumi.ResourceOptions
) -> gcp.container.NodePool:
    return gcp.container.NodePool(
        f"{name}-cpu-pool",
        name="ray-head-pool",
        project=args.project,
        cluster=cluster.name,
        location=args.location,
        node_count=args.cpu_node_count,
        node_config=gcp.container.NodePoolNodeConfigArgs(
            machine_type=args.cpu_machine_type,
            oauth_scopes=[CLOUD_PLATFORM_SCOPE],
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
        ),
        management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
        opts=child,
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
