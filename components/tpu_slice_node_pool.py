"""TpuSliceNodePool: one GKE node pool that is exactly one (multi-host) TPU slice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import pulumi
import pulumi_gcp as gcp

from components.dcn_networks import DcnAttachment
from components._options import child_options
from components.errors import ConfigError
from components.gke_cluster import CLOUD_PLATFORM_SCOPE
from components.tpu_catalogue import SliceShape, slice_shape

DRANET_NODE_LABEL = "cloud.google.com/gke-networking-dra-driver"


@dataclass
class TpuSliceNodePoolArgs:
    """Inputs of :class:`TpuSliceNodePool`."""

    cluster: pulumi.Input[str]
    """Name (or ID) of the cluster the pool joins; any Standard cluster works."""
    zone: str
    """The single zone of the slice (COMPACT placement needs one zone)."""
    cluster_location: Optional[str] = None
    """Location of the cluster: its region for a regional cluster; default: ``zone`` (zonal cluster)."""
    generation: str = "v6e"
    """TPU generation from :mod:`components.tpu_catalogue`; default v6e (Trillium)."""
    topology: str = "4x4"
    """Slice topology; default 4x4 (4 hosts of 4 chips, ct6e-standard-4t)."""
    pool_name: Optional[str] = None
    """GKE name of the pool; default ``<pod type>-<slice index>`` such as ``v6e-16-0``."""
    slice_index: int = 0
    """Position of this slice among the stack's slices; only used for the default name."""
    project: Optional[str] = None
    """Project of the cluster; default: the provider's project."""
    dcn_networks: Sequence[DcnAttachment] = field(default_factory=list)
    """Additional node networks, one per DCN network; with them the pool is labelled for DRANET."""
    spot: bool = False
    """Spot VMs (cheaper, preemptible); pair with elastic training."""
    reservation: Optional[str] = None
    """Consume this specific reservation; default: no reservation (stated explicitly, GKE TPU pools want it)."""


class TpuSliceNodePool(pulumi.ComponentResource):
    """A node pool of ``hosts`` TPU VMs placed as one ICI-connected slice.

    Everything hardware-specific (machine type, node count, chips per node,
    placement) comes from the catalogue for the generation and topology, so a
    pool can only ask GKE for a shape that exists.
    """

    shape: SliceShape
    node_pool: gcp.container.NodePool
    workload_policy: Optional[gcp.compute.ResourcePolicy]

    def __init__(self, name: str, args: TpuSliceNodePoolArgs, opts: Optional[pulumi.ResourceOptions] = None):
        self.shape = slice_shape(args.generation, args.topology, key=f"{name}.topology", generation_key=f"{name}.generation")
        if args.spot and args.reservation:
            raise ConfigError(f"{name}.reservation", args.reservation, "unset when spot is true")
        if args.dcn_networks and not self.shape.generation.supports_dranet:
            raise ConfigError(
                f"{name}.dcn_networks",
                len(args.dcn_networks),
                f"none: DRANET does not support {self.shape.machine_type}",
            )
        super().__init__("gke-ray-tpu:index:TpuSliceNodePool", name, None, opts)
        child = child_options(self, opts)
        pool_name = args.pool_name or f"{self.shape.pod_type}-{args.slice_index}"

        self.workload_policy = None
        placement = None
        if self.shape.multi_host and self.shape.generation.uses_workload_policy:
            # Ironwood multi-host slices are placed by a workload policy, not COMPACT placement.
            self.workload_policy = gcp.compute.ResourcePolicy(
                f"{name}-workload-policy",
                name=f"{pool_name}-policy",
                project=args.project,
                region=args.zone.rsplit("-", 1)[0],
                workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
                    type="HIGH_THROUGHPUT", accelerator_topology=self.shape.topology
                ),
                opts=child,
            )
            placement = gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", policy_name=self.workload_policy.name)
        elif self.shape.multi_host:
            placement = gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology=self.shape.topology)

        labels = {DRANET_NODE_LABEL: "true"} if args.dcn_networks else None
        network_config = None
        if args.dcn_networks:
            network_config = gcp.container.NodePoolNetworkConfigArgs(
                additional_node_network_configs=[
                    gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                        network=attachment.network, subnetwork=attachment.subnetwork
                    )
                    for attachment in args.dcn_networks
                ]
            )
        if args.reservation:
            affinity = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="SPECIFIC_RESERVATION",
                key="compute.googleapis.com/reservation-name",
                values=[args.reservation],
            )
        else:
            affinity = gcp.container.NodePoolNodeConfigReservationAffinityArgs(consume_reservation_type="NO_RESERVATION")

        self.node_pool = gcp.container.NodePool(
            f"{name}-pool",
            name=pool_name,
            project=args.project,
            cluster=args.cluster,
            location=args.cluster_location or args.zone,
            node_locations=[args.zone],
            # node_count, not initial_node_count: changing the latter replaces the pool (pulumi-gcp#412).
            node_count=self.shape.hosts,
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=self.shape.machine_type,
                advanced_machine_features=gcp.container.NodePoolNodeConfigAdvancedMachineFeaturesArgs(threads_per_core=1),
                gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
                labels=labels,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
                spot=args.spot or None,
                reservation_affinity=affinity,
            ),
            network_config=network_config,
            placement_policy=placement,
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            opts=child,
        )
        self.pool_name = self.node_pool.name
        self.register_outputs(
            {
                "poolName": self.pool_name,
                "machineType": self.shape.machine_type,
                "hosts": self.shape.hosts,
                "chipsPerHost": self.shape.chips_per_host,
            }
        )
