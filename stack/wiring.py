"""The stack's components, wired from its validated config: each component's arguments, built in one place.

``__main__.py`` registers the components with these arguments; the config model
declares which argument each of its keys feeds (``feeds`` on a field), so an
error a component raises names the key the user set
(``gke_ray_tpu.stack.component_keys``). The planned RayTpuCluster and the
declared runs' jobs are built from the same arguments before anything exists
(``stack/plan.py``), for preview's checks.
"""

from __future__ import annotations

from typing import Optional, Union

import pulumi

from gke_ray_tpu.components.dcn_networks import AdditionalNetwork, DcnNetworksArgs
from gke_ray_tpu.components.gcs_workload_identity import GcsWorkloadIdentityArgs, GcsWorkloadIdentityRef
from gke_ray_tpu.components.gke_cluster import GkeRayClusterArgs
from gke_ray_tpu.components.maxtext_run import MaxTextRunArgs
from gke_ray_tpu.components.ray_tpu_cluster import RayTpuClusterArgs, RayTpuClusterRef
from gke_ray_tpu.components.tpu_queue import TpuQueueArgs, TpuQueueRef
from gke_ray_tpu.components.tpu_slice_node_pool import TpuSliceNodePoolArgs
from gke_ray_tpu.components.worker_image import WorkerImageArgs
from gke_ray_tpu.stack.config import StackConfig


def gke_cluster_args(cfg: StackConfig) -> GkeRayClusterArgs:
    return GkeRayClusterArgs(
        cluster_name=cfg.existing_cluster_name or cfg.cluster_name,
        location=cfg.cluster_location,
        project=cfg.project,
        mode=cfg.cluster_mode,
        version=cfg.cluster_version,
        release_channel=cfg.release_channel,
        deletion_protection=cfg.deletion_protection,
        cpu_machine_type=cfg.cpu_machine_type,
        cpu_node_count=cfg.cpu_node_count,
        scale_to_zero=cfg.scale_to_zero_or_default,
        enable_multi_networking=cfg.enable_multi_networking,
        ray_cluster_logging=cfg.ray_cluster_logging,
        ray_cluster_monitoring=cfg.ray_cluster_monitoring,
        dranet=bool(cfg.dcn_cidrs_or_default),
        existing=bool(cfg.existing_cluster_name),
        image_streaming=cfg.image_streaming,
    )


def dcn_networks_args(cfg: StackConfig) -> Optional[DcnNetworksArgs]:
    """The DCN networks a Standard stack owns; None where there are none (Autopilot makes its own)."""
    if cfg.autopilot or not cfg.dcn_cidrs_or_default:
        return None
    return DcnNetworksArgs(region=cfg.region, name_prefix=cfg.cluster_name, cidrs=cfg.dcn_cidrs_or_default,
                           project=cfg.project)


def node_pool_args(cfg: StackConfig, index: int, cluster: pulumi.Resource,
                   networks: list[AdditionalNetwork]) -> TpuSliceNodePoolArgs:
    """Slice ``index`` of a Standard stack, in ``cluster`` (the GKE cluster resource) on the DCN ``networks``."""
    return TpuSliceNodePoolArgs(
        cluster=cluster,  # type: ignore[typeddict-item]
        zone=cfg.zone_or_default,
        generation=cfg.tpu_generation,
        topology=cfg.tpu_topology,
        slice_index=index,
        additional_networks=networks,
        capacity=cfg.capacity,
        scale_to_zero=cfg.scale_to_zero_or_default,
        image_streaming=cfg.image_streaming,
        **({"reservation": cfg.reservation} if cfg.reservation else {}),
        **({"max_run_duration_s": cfg.max_run_duration} if cfg.max_run_duration else {}),
        **({"queued_provisioning": True} if cfg.queued_provisioning else {}),
    )


def workload_identity_args(cfg: StackConfig, project_number: pulumi.Input[str]) -> GcsWorkloadIdentityArgs:
    return GcsWorkloadIdentityArgs(
        bucket_name=cfg.bucket_name,
        location=cfg.region,
        project=cfg.project,
        project_number=project_number,
        namespace=cfg.namespace,
        ksa_name=cfg.ksa_name,
        bucket_deletion=cfg.bucket_deletion,
        hierarchical_namespace=cfg.bucket_hierarchical_namespace,
    )


def worker_image_args(cfg: StackConfig, project_number: pulumi.Input[str]) -> WorkerImageArgs:
    """The TPU workers' image: ``rayImage`` with the lock installed, pushed to the stack's repository (or an existing
    one), readable by the nodes, which run as the project's default compute service account."""
    return WorkerImageArgs(
        project=cfg.project,
        location=cfg.region,
        repository=cfg.image_repository,
        existing_repository=bool(cfg.existing_image_repository),
        base_image=cfg.ray_image,
        readers=[pulumi.Output.from_input(project_number).apply(
            lambda number: f"serviceAccount:{number}-compute@developer.gserviceaccount.com"
        )],
    )


def ray_cluster_args(cfg: StackConfig, workload_identity: GcsWorkloadIdentityRef,
                     image: Optional[Union[pulumi.Input[str], pulumi.ComponentResource]] = None) -> RayTpuClusterArgs:
    """The stack's RayTpuCluster, on ``workload_identity`` (the GcsWorkloadIdentity, or its fields), its pods on
    ``image`` (the stack's WorkerImage or its ref; None: ``rayImage`` as it is)."""
    return RayTpuClusterArgs(
        workload_identity=workload_identity,
        ray_cluster_name=cfg.ray_cluster_name,
        generation=cfg.tpu_generation,
        topology=cfg.tpu_topology,
        num_slices=cfg.num_slices,
        dcn_interfaces=len(cfg.dcn_cidrs_or_default),
        image=cfg.ray_image if image is None else image,
        megascale_port=cfg.megascale_port,
        capacity=cfg.capacity,
        scale_to_zero=cfg.scale_to_zero_or_default,
        **({"elastic_min_slices": cfg.elastic_min_slices} if cfg.elastic_min_slices is not None else {}),
        **({"compute_class": cfg.compute_class_name} if cfg.autopilot else {}),
    )


def queue_args(cfg: StackConfig, ray_cluster: RayTpuClusterRef) -> Optional[TpuQueueArgs]:
    """The TpuQueue of a stack whose runs bring their own cluster (None on a stack that holds its slices)."""
    if not cfg.scale_to_zero_or_default:
        return None
    optional = {
        "pods_ready_timeout_s": cfg.pods_ready_timeout, "requeue_limit": cfg.requeue_limit, "cohort": cfg.cohort,
        "borrowing_limit": cfg.borrowing_limit, "lending_limit": cfg.lending_limit,
        "max_run_duration_s": cfg.max_run_duration if cfg.queued_provisioning else None,
    }
    return TpuQueueArgs(
        ray_cluster=ray_cluster,
        install_kueue=cfg.install_kueue,
        queueing_strategy=cfg.queueing_strategy,
        queued_provisioning=cfg.queued_provisioning,
        **{key: value for key, value in optional.items() if value is not None},  # type: ignore[typeddict-item]
    )


def run_args(cfg: StackConfig, index: int, ray_cluster: RayTpuClusterRef,
             queue: Optional[TpuQueueRef] = None) -> MaxTextRunArgs:
    """The MaxTextRun of declared run ``index`` on ``ray_cluster`` (the RayTpuCluster, or its fields), in ``queue``
    (the TpuQueue, or its fields) where the stack has one."""
    return MaxTextRunArgs(ray_cluster=ray_cluster, **({"queue": queue} if queue is not None else {}),
                          **cfg.runs[index].model_dump(exclude_none=True))
