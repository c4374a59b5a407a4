"""Reusable Pulumi components for multislice Ray Train on GKE TPUs.

``from components import DcnNetworks, TpuSliceNodePool, GcsWorkloadIdentity,
RayTpuCluster, GkeRayCluster`` gives another stack the building blocks. The
names are resolved lazily so the pure-data modules (``components.tpu_catalogue``)
import without the Pulumi SDKs, which the Ray workers do not have.
"""

from importlib import import_module

_EXPORTS = {
    "DcnNetworks": "components.dcn_networks",
    "DcnNetworksArgs": "components.dcn_networks",
    "GkeRayCluster": "components.gke_cluster",
    "GkeRayClusterArgs": "components.gke_cluster",
    "TpuSliceNodePool": "components.tpu_slice_node_pool",
    "TpuSliceNodePoolArgs": "components.tpu_slice_node_pool",
    "GcsWorkloadIdentity": "components.gcs_workload_identity",
    "GcsWorkloadIdentityArgs": "components.gcs_workload_identity",
    "RayTpuCluster": "components.ray_tpu_cluster",
    "RayTpuClusterArgs": "components.ray_tpu_cluster",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'components' has no attribute {name!r}")
    return getattr(import_module(module), name)
