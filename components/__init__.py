"""Reusable Pulumi components for multislice Ray Train on GKE TPUs.

``from components import DcnNetworks, GkeRayCluster, TpuSliceNodePool,
GcsWorkloadIdentity, RayTpuCluster, MaxTextRun`` gives another Python stack the
building blocks;
``provider/`` hosts the same classes as a Pulumi package for any language. Each
component takes what it builds on as input (a cluster resource, a Kubernetes
provider, another component: ``components/_refs.py``) and parses no stack config. Names resolve lazily, so importing one
component does not import the SDKs of the others.
"""

from importlib import import_module

_EXPORTS = {
    "DcnNetworks": "components.dcn_networks",
    "DcnNetworksArgs": "components.dcn_networks",
    "AdditionalNetwork": "components.dcn_networks",
    "GkeRayCluster": "components.gke_cluster",
    "GkeRayClusterArgs": "components.gke_cluster",
    "TpuSliceNodePool": "components.tpu_slice_node_pool",
    "TpuSliceNodePoolArgs": "components.tpu_slice_node_pool",
    "GcsWorkloadIdentity": "components.gcs_workload_identity",
    "GcsWorkloadIdentityArgs": "components.gcs_workload_identity",
    "RayTpuCluster": "components.ray_tpu_cluster",
    "RayTpuClusterArgs": "components.ray_tpu_cluster",
    "MaxTextRun": "components.maxtext_run",
    "MaxTextRunArgs": "components.maxtext_run",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'components' has no attribute {name!r}")
    return getattr(import_module(module), name)
