"""RayTpuCluster: the KubeRay RayCluster (and DRA network claim) for multislice TPU training."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components._options import child_options
from components.errors import ConfigError
from components.ray_manifests import (
    DASHBOARD_PORT,
    RayClusterSpec,
    compute_class,
    ray_cluster,
    resource_claim_template,
)

RayTpuClusterArgs = RayClusterSpec
"""Inputs of :class:`RayTpuCluster`: see :class:`components.ray_manifests.RayClusterSpec`."""


class RayTpuCluster(pulumi.ComponentResource):
    """A RayCluster with one TPU worker group whose replicas are slices.

    Needs a Kubernetes provider for a cluster that has the GKE Ray operator
    add-on (KubeRay + its TPU webhook), passed with ``opts=ResourceOptions(providers=[...])``.
    ``numOfHosts`` is the slice's host count and ``google.com/tpu`` its chips
    per host, both from the catalogue, which is exactly what the TPU webhook
    checks before admitting the RayCluster.
    """

    claim_template: Optional[k8s.resource.v1.ResourceClaimTemplate]
    compute_class: Optional[k8s.apiextensions.CustomResource]
    ray_cluster: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: RayTpuClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        _check(name, args)
        super().__init__("gke-ray-tpu:index:RayTpuCluster", name, None, opts)
        child = child_options(self, opts)
        prerequisites = []

        self.claim_template = None
        if args.dcn_interfaces:
            claim = resource_claim_template(args)
            self.claim_template = k8s.resource.v1.ResourceClaimTemplate(
                f"{name}-netdev-claim", metadata=claim["metadata"], spec=claim["spec"], opts=child
            )
            prerequisites.append(self.claim_template)

        self.compute_class = None
        if args.compute_class:
            manifest = compute_class(args)
            self.compute_class = k8s.apiextensions.CustomResource(
                f"{name}-compute-class",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=child,
            )
            prerequisites.append(self.compute_class)

        manifest = ray_cluster(args)
        self.ray_cluster = k8s.apiextensions.CustomResource(
            f"{name}-raycluster",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=child_options(self, opts, depends_on=prerequisites),
        )
        # Tied to the resource so consumers of the name wait for the RayCluster to exist.
        self.cluster_name = self.ray_cluster.urn.apply(lambda _: args.name)
        self.head_service = args.head_service
        self.register_outputs(
            {
                "rayClusterName": self.cluster_name,
                "headService": self.head_service,
                "dashboardPort": DASHBOARD_PORT,
            }
        )


def _check(name: str, args: RayTpuClusterArgs) -> None:
    if args.num_slices < 1:
        raise ConfigError(f"{name}.num_slices", args.num_slices, "an integer >= 1")
    if not 1 <= args.min_slices <= args.num_slices:
        raise ConfigError(f"{name}.min_slices", args.min_slices, f"an integer between 1 and {args.num_slices}")
    nics = args.shape.generation.dcn_nics_per_host
    if not 0 <= args.dcn_interfaces <= nics:
        raise ConfigError(
            f"{name}.dcn_interfaces", args.dcn_interfaces, f"between 0 and {nics} for {args.shape.machine_type}"
        )
