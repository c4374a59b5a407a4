"""Resource options and resources shared by the components."""

from __future__ import annotations

from typing import Optional

import pulumi


def child_options(parent: pulumi.Resource, opts: Optional[pulumi.ResourceOptions], **extra) -> pulumi.ResourceOptions:
    """Options for a component's child: parented, and waiting on whatever the component waits on.

    Pulumi does not pass a component's ``depends_on`` down to its children, so a
    RayCluster inside a component that "depends on" the node pools would
    otherwise be created before them.
    """
    inherited = list((opts.depends_on if opts else None) or [])
    own = list(extra.pop("depends_on", None) or [])
    return pulumi.ResourceOptions(parent=parent, depends_on=inherited + own or None, **extra)


def replaced_in_place(opts: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
    """Delete before replace, for a resource with a fixed name that the cloud refuses twice (a GKE node pool,
    a resource policy): Pulumi's default, the replacement created first, would fail mid-update."""
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(delete_before_replace=True))


def custom_resource(name: str, manifest: dict, opts: pulumi.ResourceOptions) -> "k8s.apiextensions.CustomResource":
    """A Kubernetes custom resource from its manifest (a plain dict with apiVersion, kind, metadata, spec)."""
    import pulumi_kubernetes as k8s

    return k8s.apiextensions.CustomResource(
        name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=manifest["metadata"],
        spec=manifest["spec"],
        opts=opts,
    )


def typed_resource(resource_type: type, name: str, manifest: dict, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """A resource of one of pulumi-kubernetes' typed classes (``k8s.networking.v1.NetworkPolicy``) from its manifest."""
    return resource_type(name, metadata=manifest["metadata"], spec=manifest["spec"], opts=opts)
