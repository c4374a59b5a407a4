"""TpuSliceNodePool: one GKE node pool that is exactly one (multi-host) TPU slice."""

import re
from typing import NotRequired, Optional, Sequence, TypedDict

import pulumi
import pulumi_gcp as gcp

from components._options import child_options
from components.dcn_networks import AdditionalNetwork
from components.gke_cluster import CLOUD_PLATFORM_SCOPE
from core.errors import ConfigError
from core.naming import COMPUTE_NAME, GKE_NAME, PROJECT_ID
from core.tpu_catalogue import DEFAULT_GENERATION, DEFAULT_TOPOLOGY, SliceShape, slice_shape

DRANET_NODE_LABEL = "cloud.google.com/gke-networking-dra-driver"
_SHARED_RESERVATION = re.compile(r"projects/([^/]+)/reservations/([^/]+)")


class TpuSliceNodePoolArgs(TypedDict):
    """Inputs of TpuSliceNodePool."""

    cluster: gcp.container.Cluster
    """The Standard cluster the pool joins (GkeRayCluster's cluster, or gcp.container.Cluster.get(...) for one this stack does not manage); the pool takes its name, location and project."""
    zone: str
    """The single zone of the slice (COMPACT placement needs one zone); inside the cluster's region."""
    generation: NotRequired[str]
    """TPU generation: v4, v5e, v5p, v6e or tpu7x. Default: v6e (Trillium)."""
    topology: NotRequired[str]
    """Slice topology of that generation. Default: 4x4 (4 hosts of 4 chips, ct6e-standard-4t)."""
    pool_name: NotRequired[str]
    """GKE name of the pool. Default: <pod type>-<slice index>, such as v6e-16-0."""
    slice_index: NotRequired[int]
    """Position of this slice among the stack's slices; only used for the default name. Default: 0."""
    additional_networks: NotRequired[Sequence[AdditionalNetwork]]
    """Additional node networks, one per DCN network (DcnNetworks.attachments); with them the pool is labelled for DRANET."""
    spot: NotRequired[bool]
    """Spot VMs (cheaper, preemptible); pair with elastic training. Default: false."""
    reservation: NotRequired[str]
    """Consume this specific reservation (a name, or projects/<p>/reservations/<name> for a shared one). Default: none named."""


def pool_name_for(shape: SliceShape, slice_index: int) -> str:
    return f"{shape.pod_type}-{slice_index}"


def workload_policy_name(pool_name: str) -> str:
    return f"{pool_name}-policy"


def check_reservation(reservation: object, key: str) -> None:
    """A reservation name, or ``projects/<project>/reservations/<name>`` for one shared from another project."""
    name = reservation
    if isinstance(reservation, str) and (shared := _SHARED_RESERVATION.fullmatch(reservation)):
        if not PROJECT_ID.matches(shared.group(1)):
            raise ConfigError(key, reservation, f"a project of the shared reservation that is {PROJECT_ID.what}")
        name = shared.group(2)
    if not COMPUTE_NAME.matches(name):
        raise ConfigError(
            key, reservation, f"a reservation name ({COMPUTE_NAME.description}) or projects/<project>/reservations/<name>"
        )


def check_capacity(spot: bool, reservation: Optional[str], key: str) -> None:
    """Spot VMs cannot consume a reservation: asking for both is refused (``key`` names the reservation)."""
    if spot and reservation:
        raise ConfigError(key, reservation, "unset when spot is true: Spot VMs cannot consume a reservation")


def check_network_count(shape: SliceShape, count: int, value: object, key: str) -> None:
    """A host can take only as many DCN networks as it has NICs that DRANET hands to a pod."""
    nics = shape.generation.dcn_nics_per_host
    if count > nics:
        raise ConfigError(
            key, value, f"at most {nics} networks: a {shape.machine_type} host has {nics} NICs that DRANET can hand to a pod"
        )


def check_args(args: TpuSliceNodePoolArgs, prefix: str = "TpuSliceNodePoolArgs.") -> SliceShape:
    """The rules on the arguments alone; returns the slice's shape."""
    shape = slice_shape(
        args.get("generation", DEFAULT_GENERATION),
        args.get("topology", DEFAULT_TOPOLOGY),
        key=f"{prefix}topology",
        generation_key=f"{prefix}generation",
    )
    check_capacity(bool(args.get("spot")), args.get("reservation"), f"{prefix}reservation")
    if args.get("reservation"):
        check_reservation(args["reservation"], f"{prefix}reservation")
    networks = args.get("additional_networks") or []
    check_network_count(shape, len(networks), len(networks), f"{prefix}additional_networks")
    pool = args.get("pool_name") or pool_name_for(shape, int(args.get("slice_index", 0)))
    GKE_NAME.check(pool, f"{prefix}pool_name")
    if shape.multi_host and shape.generation.uses_workload_policy:
        COMPUTE_NAME.check_derived(workload_policy_name(pool), pool, f"{prefix}pool_name", "workload policy name")
    return shape


class TpuSliceNodePool(pulumi.ComponentResource):
    """A node pool of TPU VMs placed as one ICI-connected slice.

    Everything hardware-specific (machine type, node count, chips per node,
    placement) comes from the TPU catalogue for the generation and topology, so
    a pool can only ask GKE for a shape that exists.
    """

    pool_name: pulumi.Output[str]
    """The node pool's GKE name."""
    machine_type: pulumi.Output[str]
    """Machine type of every host."""
    hosts: pulumi.Output[int]
    """TPU VMs in the slice (the pool's node count)."""
    chips_per_host: pulumi.Output[int]
    """TPU chips per host (the google.com/tpu a worker pod requests)."""

    def __init__(self, name: str, args: TpuSliceNodePoolArgs, opts: Optional[pulumi.ResourceOptions] = None):
        shape = check_args(args)
        super().__init__("gke-ray-tpu:index:TpuSliceNodePool", name, None, opts)
        child = child_options(self, opts)
        cluster: gcp.container.Cluster = args["cluster"]
        zone = args["zone"]
        pool_name = args.get("pool_name") or pool_name_for(shape, int(args.get("slice_index", 0)))
        networks = list(args.get("additional_networks") or [])
        self.shape = shape

        self.workload_policy = None
        placement = None
        if shape.multi_host and shape.generation.uses_workload_policy:
            # Ironwood multi-host slices are placed by a workload policy, not COMPACT placement.
            self.workload_policy = gcp.compute.ResourcePolicy(
                f"{name}-workload-policy",
                name=workload_policy_name(pool_name),
                project=cluster.project,
                region=zone.rsplit("-", 1)[0],
                workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
                    type="HIGH_THROUGHPUT", accelerator_topology=shape.topology
                ),
                opts=child,
            )
            placement = gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", policy_name=self.workload_policy.name)
        elif shape.multi_host:
            placement = gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology=shape.topology)

        network_config = None
        if networks:
            network_config = gcp.container.NodePoolNetworkConfigArgs(
                additional_node_network_configs=[
                    gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                        network=network["network"], subnetwork=network["subnetwork"]
                    )
                    for network in networks
                ]
            )

        self.node_pool = gcp.container.NodePool(
            f"{name}-pool",
            name=pool_name,
            project=cluster.project,
            cluster=cluster.name,
            location=cluster.location,
            node_locations=[zone],
            # node_count, not initial_node_count: changing the latter replaces the pool (pulumi-gcp#412).
            node_count=shape.hosts,
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=shape.machine_type,
                advanced_machine_features=gcp.container.NodePoolNodeConfigAdvancedMachineFeaturesArgs(threads_per_core=1),
                gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
                labels={DRANET_NODE_LABEL: "true"} if networks else None,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
                spot=args.get("spot") or None,
                reservation_affinity=reservation_affinity(args.get("reservation"), bool(args.get("spot"))),
            ),
            network_config=network_config,
            placement_policy=placement,
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            opts=child,
        )
        self.pool_name = self.node_pool.name
        self.machine_type = pulumi.Output.from_input(shape.machine_type)
        self.hosts = pulumi.Output.from_input(shape.hosts)
        self.chips_per_host = pulumi.Output.from_input(shape.chips_per_host)
        self.register_outputs(
            {
                "poolName": self.pool_name,
                "machineType": self.machine_type,
                "hosts": self.hosts,
                "chipsPerHost": self.chips_per_host,
            }
        )


def reservation_affinity(
    reservation: Optional[str], spot: bool
) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs:
    """Stated, never left to the API default: the field is ForceNew, so a read-back that differs would replace the slice.

    A named reservation is consumed specifically; Spot VMs cannot consume
    reservations (NO_RESERVATION); otherwise ANY_RESERVATION, the Compute
    Engine default the tutorial's command gets: a matching reservation is used
    when there is one, on-demand capacity when not.
    """
    if reservation:
        return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key="compute.googleapis.com/reservation-name",
            values=[reservation],
        )
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="NO_RESERVATION" if spot else "ANY_RESERVATION"
    )
