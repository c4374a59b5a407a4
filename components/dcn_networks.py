"""DcnNetworks: the extra VPC networks that carry cross-slice (DCN) TPU traffic."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import pulumi
import pulumi_gcp as gcp

from components._options import child_options
from components.errors import ConfigError
from components.stack_config import TUTORIAL_DCN_CIDRS, check_dcn_cidrs

JUMBO_MTU = 8896
"""The MTU the tutorial, DRANET and Cluster Toolkit all use for TPU DCN networks."""


@dataclass
class DcnNetworksArgs:
    """Inputs of :class:`DcnNetworks`."""

    region: str
    """Region of the subnets (the TPU slices' region)."""
    name_prefix: str
    """Networks are named ``<name_prefix>-net-<i>``, subnets ``<name_prefix>-tpu-subnet-<i>``; i counts from 1."""
    cidrs: Sequence[str] = field(default_factory=lambda: list(TUTORIAL_DCN_CIDRS))
    """One primary range per network; default: the tutorial's 10.50.0.0/16 and 10.60.0.0/16."""
    project: Optional[str] = None
    """Project of the networks; default: the provider's project."""
    mtu: int = JUMBO_MTU
    """MTU of every network; default 8896 (jumbo frames for DCN)."""


@dataclass(frozen=True)
class DcnAttachment:
    """One network/subnetwork pair, as a node pool's additional node network needs it."""

    network: pulumi.Output[str]
    subnetwork: pulumi.Output[str]


class DcnNetworks(pulumi.ComponentResource):
    """N custom-mode VPCs with jumbo MTU, one regional subnet each, and an ingress rule.

    The tutorial creates the networks and subnets but no firewall rule; a new
    custom VPC denies all ingress, so the slices could not reach each other over
    these NICs. Each network gets an INGRESS rule allowing tcp, udp and icmp from
    its own subnet only. No secondary ranges: DRANET only manages gVNICs
    without them.
    """

    networks: list[gcp.compute.Network]
    subnets: list[gcp.compute.Subnetwork]
    firewalls: list[gcp.compute.Firewall]
    attachments: list[DcnAttachment]

    def __init__(self, name: str, args: DcnNetworksArgs, opts: Optional[pulumi.ResourceOptions] = None):
        cidrs = check_dcn_cidrs(args.cidrs, key=f"{name}.cidrs")
        if args.mtu < 1300 or args.mtu > JUMBO_MTU:
            raise ConfigError(f"{name}.mtu", args.mtu, f"an MTU between 1300 and {JUMBO_MTU}")
        super().__init__("gke-ray-tpu:index:DcnNetworks", name, None, opts)
        child = child_options(self, opts)

        self.networks, self.subnets, self.firewalls, self.attachments = [], [], [], []
        for index, cidr in enumerate(cidrs, start=1):
            network = gcp.compute.Network(
                f"{name}-net-{index}",
                name=f"{args.name_prefix}-net-{index}",
                project=args.project,
                auto_create_subnetworks=False,
                mtu=args.mtu,
                description=f"TPU DCN network {index} for {args.name_prefix}",
                opts=child,
            )
            subnet = gcp.compute.Subnetwork(
                f"{name}-tpu-subnet-{index}",
                name=f"{args.name_prefix}-tpu-subnet-{index}",
                project=args.project,
                network=network.id,
                region=args.region,
                ip_cidr_range=cidr,
                opts=child,
            )
            firewall = gcp.compute.Firewall(
                f"{name}-net-{index}-allow-internal",
                name=f"{args.name_prefix}-net-{index}-allow-internal",
                project=args.project,
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
            self.attachments.append(DcnAttachment(network=network.name, subnetwork=subnet.name))

        self.network_names = pulumi.Output.all(*[n.name for n in self.networks])
        self.subnet_names = pulumi.Output.all(*[s.name for s in self.subnets])
        self.register_outputs({"networkNames": self.network_names, "subnetNames": self.subnet_names})
