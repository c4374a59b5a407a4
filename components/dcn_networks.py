"""DcnNetworks: the extra VPC networks that carry cross-slice (DCN) TPU traffic."""

import ipaddress
from typing import NotRequired, Optional, Sequence, TypedDict

import pulumi
import pulumi_gcp as gcp

from gke_ray_tpu.components._options import child_options
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.bounds import Bounds
from gke_ray_tpu.core.naming import COMPUTE_NAME

JUMBO_MTU = 8896
"""The MTU the tutorial, DRANET and Cluster Toolkit all use for TPU DCN networks."""
MTU = Bounds(1300, JUMBO_MTU)
"""``DcnNetworksArgs.mtu``: Compute Engine's range for a VPC network's MTU, up to the jumbo frames DCN uses."""
DEFAULT_CIDRS = ("10.50.0.0/16", "10.60.0.0/16")
"""The tutorial's two DCN subnet ranges."""


class DcnNetworksArgs(TypedDict):
    """Inputs of DcnNetworks."""

    region: pulumi.Input[str]
    """Region of the subnets (the TPU slices' region)."""
    name_prefix: str
    """Networks are named <name_prefix>-net-<i>, subnets <name_prefix>-tpu-subnet-<i> and firewall rules <name_prefix>-net-<i>-allow-internal; i counts from 1."""
    cidrs: NotRequired[Sequence[str]]
    """One primary IPv4 range per network: private, /8 to /29, disjoint. Default: the tutorial's 10.50.0.0/16 and 10.60.0.0/16."""
    project: NotRequired[pulumi.Input[str]]
    """Project of the networks. Default: the provider's project."""
    mtu: NotRequired[int]
    """MTU of every network, 1300 to 8896. Default: 8896 (jumbo frames for DCN)."""


class AdditionalNetwork(TypedDict):
    """One network/subnetwork pair, as a node pool's additional node network takes it."""

    network: pulumi.Input[str]
    """Name of the VPC network."""
    subnetwork: pulumi.Input[str]
    """Name of its subnetwork in the node pool's region."""


def resource_names(name_prefix: str, index: int) -> dict[str, str]:
    """The GCE names of DCN network ``index`` (from 1): network, subnetwork, firewall rule."""
    return {
        "network": f"{name_prefix}-net-{index}",
        "subnetwork": f"{name_prefix}-tpu-subnet-{index}",
        "firewall rule": f"{name_prefix}-net-{index}-allow-internal",
    }


def check_name_prefix(name_prefix: object, count: int, key: str = "DcnNetworksArgs.name_prefix") -> None:
    """Every name derived from ``name_prefix`` must be a valid Compute Engine name."""
    if not isinstance(name_prefix, str):
        raise ConfigError(key, name_prefix, "a string")
    for index in range(1, count + 1):
        for what, name in resource_names(name_prefix, index).items():
            COMPUTE_NAME.check_derived(name, name_prefix, key, f"DCN {what} name")


def check_cidrs(cidrs: object, key: str = "DcnNetworksArgs.cidrs") -> tuple[str, ...]:
    """DCN subnet ranges must be valid, private, subnet-sized and disjoint."""
    if not isinstance(cidrs, (list, tuple)) or not all(isinstance(c, str) for c in cidrs):
        raise ConfigError(key, cidrs, 'a list of strings such as ["10.50.0.0/16", "10.60.0.0/16"]')
    networks: list[ipaddress.IPv4Network] = []
    for cidr in cidrs:
        try:
            network = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError as error:
            raise ConfigError(key, cidr, f"an IPv4 network in CIDR form ({error})") from None
        if not network.is_private or not 8 <= network.prefixlen <= 29:
            raise ConfigError(key, cidr, "a private IPv4 range with a prefix between /8 and /29")
        for other in networks:
            if network.overlaps(other):
                raise ConfigError(key, cidr, f"a range that does not overlap {other}")
        networks.append(network)
    return tuple(str(n) for n in networks)


class DcnNetworks(pulumi.ComponentResource):
    """Custom-mode VPCs with jumbo MTU, one regional subnet each, and an ingress rule each.

    The tutorial creates the networks and subnets but no firewall rule; a new
    custom VPC denies all ingress, so the slices could not reach each other over
    these NICs. Each network gets an INGRESS rule allowing tcp, udp and icmp from
    its own subnet only. No secondary ranges: DRANET only manages gVNICs
    without them.
    """

    network_names: pulumi.Output[list[str]]
    """Names of the networks, in order."""
    subnet_names: pulumi.Output[list[str]]
    """Names of the subnetworks, in order."""

    def __init__(self, name: str, args: DcnNetworksArgs, opts: Optional[pulumi.ResourceOptions] = None):
        cidrs = check_cidrs(list(args.get("cidrs", DEFAULT_CIDRS)))
        mtu = MTU.check(args.get("mtu", JUMBO_MTU), "DcnNetworksArgs.mtu")
        prefix = args["name_prefix"]
        check_name_prefix(prefix, len(cidrs))
        super().__init__("gke-ray-tpu:index:DcnNetworks", name, None, opts)
        child = child_options(self, opts)

        self.networks, self.subnets, self.firewalls = [], [], []
        for index, cidr in enumerate(cidrs, start=1):
            names = resource_names(prefix, index)
            network = gcp.compute.Network(
                f"{name}-net-{index}",
                name=names["network"],
                project=args.get("project"),
                auto_create_subnetworks=False,
                mtu=mtu,
                description=f"TPU DCN network {index} for {prefix}",
                opts=child,
            )
            subnet = gcp.compute.Subnetwork(
                f"{name}-tpu-subnet-{index}",
                name=names["subnetwork"],
                project=args.get("project"),
                network=network.id,
                region=args["region"],
                ip_cidr_range=cidr,
                opts=child,
            )
            firewall = gcp.compute.Firewall(
                f"{name}-net-{index}-allow-internal",
                name=names["firewall rule"],
                project=args.get("project"),
                network=network.id,
                direction="INGRESS",
                source_ranges=[cidr],
                allows=[gcp.compute.FirewallAllowArgs(protocol=p) for p in ("tcp", "udp", "icmp")],
                description="Slice-to-slice DCN traffic inside this network's own subnet",
                opts=child,
            )
            self.networks.append(network)
            self.subnets.append(subnet)
            self.firewalls.append(firewall)

        self.network_names = pulumi.Output.all(*[n.name for n in self.networks])
        self.subnet_names = pulumi.Output.all(*[s.name for s in self.subnets])
        self.register_outputs({"networkNames": self.network_names, "subnetNames": self.subnet_names})

    @property
    def attachments(self) -> list[AdditionalNetwork]:
        """One AdditionalNetwork per network, for TpuSliceNodePoolArgs.additional_networks."""
        return [AdditionalNetwork(network=n.name, subnetwork=s.name) for n, s in zip(self.networks, self.subnets)]
