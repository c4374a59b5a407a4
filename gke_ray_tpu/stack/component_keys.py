"""Errors raised inside the components, under the config keys the program's user sets.

``__main__.py`` builds every component inside :func:`config_keys`, so a
component's ``RayTpuClusterArgs.image`` error reaches the user as
``gke-ray-tpu:rayImage``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from gke_ray_tpu.components.maxtext_run import MaxTextRunArgs
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.config import StackConfig, config_key


def component_keys(cfg: StackConfig) -> dict[str, str]:
    """The config key behind each component argument the stack sets, for errors raised inside components."""
    key = config_key
    return {
        "GkeRayClusterArgs.cluster_name": key("existing_cluster_name" if cfg.existing_cluster_name else "cluster_name"),
        "GkeRayClusterArgs.location": key("existing_cluster_location" if cfg.existing_cluster_name else "region"),
        "GkeRayClusterArgs.mode": key("cluster_mode"),
        "GkeRayClusterArgs.version": key("cluster_version"),
        "GkeRayClusterArgs.release_channel": key("release_channel"),
        "GkeRayClusterArgs.cpu_node_count": key("cpu_node_count"),
        "DcnNetworksArgs.name_prefix": key("cluster_name"),
        "DcnNetworksArgs.cidrs": key("dcn_cidrs"),
        "TpuSliceNodePoolArgs.generation": key("tpu_generation"),
        "TpuSliceNodePoolArgs.topology": key("tpu_topology"),
        "TpuSliceNodePoolArgs.capacity": key("capacity"),
        "TpuSliceNodePoolArgs.reservation": key("reservation"),
        "TpuSliceNodePoolArgs.scale_to_zero": key("scale_to_zero"),
        "TpuSliceNodePoolArgs.max_run_duration_s": key("max_run_duration"),
        "TpuSliceNodePoolArgs.additional_networks": key("dcn_cidrs"),
        "GcsWorkloadIdentityArgs.bucket_name": key("bucket_name"),
        "GcsWorkloadIdentityArgs.namespace": key("namespace"),
        "GcsWorkloadIdentityArgs.ksa_name": key("ksa_name"),
        "GcsWorkloadIdentityArgs.bucket_deletion": key("bucket_deletion"),
        "GcsWorkloadIdentityArgs.hierarchical_namespace": key("bucket_hierarchical_namespace"),
        "RayTpuClusterArgs.ray_cluster_name": key("ray_cluster_name"),
        "RayTpuClusterArgs.compute_class": key("ray_cluster_name"),
        "RayTpuClusterArgs.generation": key("tpu_generation"),
        "RayTpuClusterArgs.topology": key("tpu_topology"),
        "RayTpuClusterArgs.num_slices": key("num_slices"),
        "RayTpuClusterArgs.elastic_min_slices": key("elastic_min_slices"),
        "RayTpuClusterArgs.dcn_interfaces": key("dcn_cidrs"),
        "RayTpuClusterArgs.image": key("ray_image"),
        "RayTpuClusterArgs.megascale_port": key("megascale_port"),
        "RayTpuClusterArgs.capacity": key("capacity"),
        "RayTpuClusterArgs.scale_to_zero": key("scale_to_zero"),
        "WorkerImageArgs.repository": key("existing_image_repository" if cfg.existing_image_repository else "cluster_name"),
        "WorkerImageArgs.base_image": key("ray_image"),
        **{f"MaxTextRunArgs.{field}": key("runs") for field in MaxTextRunArgs.__annotations__},
    }


@contextmanager
def config_keys(cfg: StackConfig) -> Iterator[None]:
    """Errors raised inside components name the config key the user sets, not the component argument."""
    try:
        yield
    except ConfigError as error:
        renamed = component_keys(cfg).get(error.key)
        if renamed is None:
            raise
        raise error.renamed(renamed) from None
