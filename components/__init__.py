"""Reusable Pulumi components for multislice Ray Train on GKE TPUs.

``from gke_ray_tpu.components import DcnNetworks, GkeRayCluster, TpuSliceNodePool,
GcsWorkloadIdentity, RayTpuCluster, MaxTextRun, TpuQueue, WorkerImage`` gives another Python stack the
building blocks;
``provider/`` hosts the same classes (all but WorkerImage, so far) as a Pulumi package for any language. Each
component takes what it builds on as input (a cluster resource, a Kubernetes
provider, another component: ``components/_refs.py``) and parses no stack config. Names resolve lazily, so importing one
component does not import the SDKs of the others.
"""

from importlib import import_module

_EXPORTS = {
    "DcnNetworks": "gke_ray_tpu.components.dcn_networks",
    "DcnNetworksArgs": "gke_ray_tpu.components.dcn_networks",
    "AdditionalNetwork": "gke_ray_tpu.components.dcn_networks",
    "GkeRayCluster": "gke_ray_tpu.components.gke_cluster",
    "GkeRayClusterArgs": "gke_ray_tpu.components.gke_cluster",
    "TpuSliceNodePool": "gke_ray_tpu.components.tpu_slice_node_pool",
    "TpuSliceNodePoolArgs": "gke_ray_tpu.components.tpu_slice_node_pool",
    "GcsWorkloadIdentity": "gke_ray_tpu.components.gcs_workload_identity",
    "GcsWorkloadIdentityArgs": "gke_ray_tpu.components.gcs_workload_identity",
    "RayTpuCluster": "gke_ray_tpu.components.ray_tpu_cluster",
    "RayTpuClusterArgs": "gke_ray_tpu.components.ray_tpu_cluster",
    "MaxTextRun": "gke_ray_tpu.components.maxtext_run",
    "MaxTextRunArgs": "gke_ray_tpu.components.maxtext_run",
    "TpuQueue": "gke_ray_tpu.components.tpu_queue",
    "TpuQueueArgs": "gke_ray_tpu.components.tpu_queue",
    "WorkerImage": "gke_ray_tpu.components.worker_image",
    "WorkerImageArgs": "gke_ray_tpu.components.worker_image",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)
