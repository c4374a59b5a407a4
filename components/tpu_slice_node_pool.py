"""TpuSliceNodePool: one GKE node pool that is exactly one (multi-host) TPU slice."""

from typing import NotRequired, Optional, Sequence, TypedDict

import pulumi
import pulumi_gcp as gcp

from gke_ray_tpu.components._options import child_options, replaced_in_place
from gke_ray_tpu.components.dcn_networks import AdditionalNetwork
from gke_ray_tpu.components.gke_cluster import CLOUD_PLATFORM_SCOPE, DEFAULT_IMAGE_STREAMING
from gke_ray_tpu.core.capacity import CAPACITY, DEFAULT_CAPACITY, capacity_mode, check_capacity
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.naming import COMPUTE_NAME, GKE_NAME
from gke_ray_tpu.core.tpu_catalogue import DEFAULT_GENERATION, DEFAULT_TOPOLOGY, SliceShape, slice_shape

DRANET_NODE_LABEL = "cloud.google.com/gke-networking-dra-driver"


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
    capacity: NotRequired[str]
    """How GKE obtains the VMs: on-demand, spot (pair with elastic training), flex-start (Dynamic Workload Scheduler) or reservation. Default: on-demand."""
    reservation: NotRequired[str]
    """The reservation capacity reservation consumes (a name, or projects/<p>/reservations/<name> for a shared one); required exactly then."""
    scale_to_zero: NotRequired[bool]
    """Autoscale the pool between 0 and the slice's hosts (GKE adds or removes the whole slice), so no VM is billed while no pod asks for one. Default: true for flex-start (required), false otherwise."""
    max_run_duration_s: NotRequired[int]
    """flex-start only: seconds after which GKE stops a node, at most 7 days (GKE's limit and default)."""
    image_streaming: NotRequired[bool]
    """GKE image streaming (gcfs) on the slice's hosts: a Ray pod whose image is in Artifact Registry starts before the image is pulled whole. Needs the Container File System API enabled. Default: true."""
    queued_provisioning: NotRequired[bool]
    """flex-start only: GKE's queued provisioning, the slice brought whole for a ProvisioningRequest (which Kueue's admission check makes: TpuQueue's queued_provisioning) and only then; its nodes carry the cloud.google.com/gke-queued taint. Default: false."""


def pool_name_for(shape: SliceShape, slice_index: int) -> str:
    return f"{shape.pod_type}-{slice_index}"


def workload_policy_name(pool_name: str) -> str:
    return f"{pool_name}-policy"


def check_network_count(shape: SliceShape, count: int, value: object, key: str) -> None:
    """A host can take only as many DCN networks as it has NICs that DRANET hands to a pod."""
    nics = shape.generation.dcn_nics_per_host
    if count > nics:
        raise ConfigError(
            key, value, f"at most {nics} networks: a {shape.machine_type} host has {nics} NICs that DRANET can hand to a pod"
        )


def scale_to_zero_of(args: TpuSliceNodePoolArgs) -> bool:
    """As asked, else by default for the capacity mode (after :func:`check_args`)."""
    return CAPACITY[args.get("capacity", DEFAULT_CAPACITY)].scale_to_zero(args.get("scale_to_zero"))


def check_args(args: TpuSliceNodePoolArgs, prefix: str = "TpuSliceNodePoolArgs.") -> SliceShape:
    """The rules on the arguments alone; returns the slice's shape."""
    shape = slice_shape(
        args.get("generation", DEFAULT_GENERATION),
        args.get("topology", DEFAULT_TOPOLOGY),
        key=f"{prefix}topology",
        generation_key=f"{prefix}generation",
    )
    mode = capacity_mode(args.get("capacity", DEFAULT_CAPACITY), f"{prefix}capacity")
    check_capacity(
        mode.name, args.get("reservation"), mode.scale_to_zero(args.get("scale_to_zero")),
        args.get("max_run_duration_s"), shape.generation, key=lambda name: f"{prefix}{name}",
    )
    if args.get("queued_provisioning") and mode.name != "flex-start":
        raise ConfigError(f"{prefix}queued_provisioning", True, f"false for {mode.name} slices: GKE's queued "
                          "provisioning is a flex-start (Dynamic Workload Scheduler) mode")
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

        self.workload_policy = self._workload_policy(name, shape, pool_name, cluster, zone, child)
        capacity = CAPACITY[args.get("capacity", DEFAULT_CAPACITY)]
        flex_start = capacity.name == "flex-start"
        scale_to_zero = scale_to_zero_of(args)
        self.node_pool = gcp.container.NodePool(
            f"{name}-pool",
            name=pool_name,
            project=cluster.project,
            cluster=cluster.name,
            location=cluster.location,
            node_locations=[zone],
            # node_count, not initial_node_count, for a fixed pool: changing the latter replaces the pool
            # (pulumi-gcp#412). An autoscaled pool starts empty and the autoscaler owns its count.
            node_count=None if scale_to_zero else shape.hosts,
            initial_node_count=0 if scale_to_zero else None,
            autoscaling=autoscaling(shape, flex_start) if scale_to_zero else None,
            node_config=node_config(shape, args, bool(networks)),
            network_config=network_config(networks),
            placement_policy=placement_policy(shape, self.workload_policy),
            # Flex-start nodes are not repaired (GKE would recreate them outside the request; xpk and
            # Cluster Toolkit turn it off); every other slice keeps the tutorial's auto-repair.
            management=gcp.container.NodePoolManagementArgs(auto_repair=not flex_start, auto_upgrade=True),
            queued_provisioning=(gcp.container.NodePoolQueuedProvisioningArgs(enabled=True)
                                 if args.get("queued_provisioning") else None),
            opts=replaced_in_place(child),
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


    @staticmethod
    def _workload_policy(name: str, shape: SliceShape, pool_name: str, cluster: gcp.container.Cluster, zone: str,
                         child: pulumi.ResourceOptions) -> Optional[gcp.compute.ResourcePolicy]:
        """Ironwood multi-host slices are placed by a workload policy, not COMPACT placement alone."""
        if not (shape.multi_host and shape.generation.uses_workload_policy):
            return None
        return gcp.compute.ResourcePolicy(
            f"{name}-workload-policy",
            name=workload_policy_name(pool_name),
            project=cluster.project,
            region=zone.rsplit("-", 1)[0],
            workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
                type="HIGH_THROUGHPUT", accelerator_topology=shape.topology
            ),
            opts=replaced_in_place(child),
        )


def placement_policy(shape: SliceShape, workload_policy: Optional[gcp.compute.ResourcePolicy]
                     ) -> Optional[gcp.container.NodePoolPlacementPolicyArgs]:
    """COMPACT placement for a multi-host slice: by its workload policy where it has one, else by topology."""
    if workload_policy is not None:
        return gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", policy_name=workload_policy.name)
    if shape.multi_host:
        return gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology=shape.topology)
    return None


def network_config(networks: Sequence[AdditionalNetwork]) -> Optional[gcp.container.NodePoolNetworkConfigArgs]:
    if not networks:
        return None
    return gcp.container.NodePoolNetworkConfigArgs(
        additional_node_network_configs=[
            gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                network=network["network"], subnetwork=network["subnetwork"]
            )
            for network in networks
        ]
    )


def node_config(shape: SliceShape, args: TpuSliceNodePoolArgs, dranet: bool) -> gcp.container.NodePoolNodeConfigArgs:
    capacity = CAPACITY[args.get("capacity", DEFAULT_CAPACITY)]
    return gcp.container.NodePoolNodeConfigArgs(
        machine_type=shape.machine_type,
        advanced_machine_features=gcp.container.NodePoolNodeConfigAdvancedMachineFeaturesArgs(threads_per_core=1),
        gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
        labels={DRANET_NODE_LABEL: "true"} if dranet else None,
        oauth_scopes=[CLOUD_PLATFORM_SCOPE],
        workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
        spot=True if capacity.spot else None,
        flex_start=True if capacity.name == "flex-start" else None,
        max_run_duration=f"{args['max_run_duration_s']}s" if args.get("max_run_duration_s") else None,
        reservation_affinity=reservation_affinity(capacity.name, args.get("reservation")),
        gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=args.get("image_streaming", DEFAULT_IMAGE_STREAMING)),
    )


def autoscaling(shape: SliceShape, flex_start: bool) -> gcp.container.NodePoolAutoscalingArgs:
    """From 0 to the slice's hosts: GKE scales a multi-host TPU pool as one slice, all hosts or none.

    Per-zone counts (``min_node_count``/``max_node_count``), as Cluster Toolkit
    uses for TPU flex-start (the ``total_*`` pair is refused there); the pool
    has one zone, so they are the slice's counts. Flex-start takes capacity in
    whichever way GKE finds it (``ANY``), as xpk's ``--flex`` does.
    """
    return gcp.container.NodePoolAutoscalingArgs(
        min_node_count=0, max_node_count=shape.hosts, location_policy="ANY" if flex_start else None
    )


def reservation_affinity(capacity: str, reservation: Optional[str]) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs:
    """Stated, never left to the API default: the field is ForceNew, so a read-back that differs would replace the slice.

    ``reservation`` consumes the named one specifically; Spot VMs cannot
    consume reservations and flex-start uses none (NO_RESERVATION); on-demand
    gets ANY_RESERVATION, the Compute Engine default the tutorial's command
    gets: a matching reservation is used when there is one, on-demand capacity
    when not.
    """
    if capacity == "reservation":
        return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key="compute.googleapis.com/reservation-name",
            values=[reservation],
        )
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="ANY_RESERVATION" if capacity == "on-demand" else "NO_RESERVATION"
    )
