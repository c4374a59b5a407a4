"""The stack: DCN networks, a GKE cluster, one node pool per TPU slice, storage, and the RayCluster.

Everything is driven by the stack's config (``Pulumi.<stack>.yaml``), validated
once by :func:`components.stack_config.parse_stack_config` before any resource
is registered. The exports are what ``python -m training.submit`` reads.
"""

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.dcn_networks import DcnNetworks, DcnNetworksArgs
from components.gcs_workload_identity import GcsWorkloadIdentity, GcsWorkloadIdentityArgs
from components.gke_cluster import GkeRayCluster, GkeRayClusterArgs
from components.ray_manifests import DASHBOARD_PORT, DATA_MOUNT
from components.preflight import check_planned_run
from components.ray_tpu_cluster import RayTpuCluster, RayTpuClusterArgs
from components.stack_config import parse_stack_config, raw_pulumi_config
from components.tpu_slice_node_pool import TpuSliceNodePool, TpuSliceNodePoolArgs

cfg = parse_stack_config(raw_pulumi_config())
# Sharding, HBM and cost of the planned training run, before any TPU is paid for.
check_planned_run(cfg, info=pulumi.log.info, warn=pulumi.log.warn)

cluster = GkeRayCluster(
    "gke",
    GkeRayClusterArgs(
        cluster_name=cfg.existing_cluster_name or cfg.cluster_name,
        location=cfg.cluster_location,
        project=cfg.project,
        mode=cfg.cluster_mode,
        version=cfg.cluster_version,
        release_channel=cfg.release_channel,
        deletion_protection=cfg.deletion_protection,
        cpu_machine_type=cfg.cpu_machine_type,
        cpu_node_count=cfg.cpu_node_count,
        enable_multi_networking=cfg.enable_multi_networking,
        existing=bool(cfg.existing_cluster_name),
    ),
)
in_cluster = pulumi.ResourceOptions(providers=[cluster.provider])

slices = []
if not cfg.autopilot:
    # Autopilot provisions TPU nodes itself (through the ComputeClass below) and
    # its accelerator network profile creates the DCN networks, so only
    # Standard stacks own networks and node pools.
    dcn = (
        DcnNetworks("dcn", DcnNetworksArgs(region=cfg.region, name_prefix=cfg.cluster_name, cidrs=cfg.dcn_cidrs, project=cfg.project))
        if cfg.dcn_cidrs
        else None
    )
    slices = [
        TpuSliceNodePool(
            f"slice-{index}",
            TpuSliceNodePoolArgs(
                cluster=cluster.name,
                zone=cfg.zone,
                cluster_location=cfg.cluster_location,
                generation=cfg.shape.generation.name,
                topology=cfg.shape.topology,
                slice_index=index,
                project=cfg.project,
                dcn_networks=dcn.attachments if dcn else [],
                spot=cfg.spot,
                reservation=cfg.reservation,
            ),
        )
        for index in range(cfg.num_slices)
    ]

namespace_ready = []
if cfg.namespace != "default":
    namespace_ready.append(
        k8s.core.v1.Namespace("namespace", metadata=k8s.meta.v1.ObjectMetaArgs(name=cfg.namespace), opts=in_cluster)
    )

project_number = cfg.project_number or gcp.organizations.get_project_output(project_id=cfg.project).number
storage = GcsWorkloadIdentity(
    "storage",
    GcsWorkloadIdentityArgs(
        bucket_name=cfg.bucket_name,
        location=cfg.region,
        project=cfg.project,
        project_number=project_number,
        namespace=cfg.namespace,
        ksa_name=cfg.ksa_name,
        bucket_deletion=cfg.bucket_deletion,
    ),
    opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=namespace_ready),
)

ray = RayTpuCluster(
    "ray",
    RayTpuClusterArgs(
        name=cfg.ray_cluster_name,
        namespace=cfg.namespace,
        service_account=cfg.ksa_name,
        bucket_name=cfg.bucket_name,
        shape=cfg.shape,
        num_slices=cfg.num_slices,
        min_slices=cfg.elastic_min_slices,
        dcn_interfaces=cfg.dcn_interfaces,
        image=cfg.ray_image,
        megascale_port=cfg.megascale_port,
        compute_class=f"{cfg.ray_cluster_name}-tpu" if cfg.autopilot else None,
        spot=cfg.spot,
    ),
    # Pods need the KSA, the bucket binding and their node pools before they can start.
    opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=[storage, *slices]),
)

pulumi.export("project", cfg.project)
pulumi.export("region", cfg.region)
pulumi.export("zone", cfg.zone)
pulumi.export("clusterName", cluster.name)
pulumi.export("clusterLocation", cluster.location)
pulumi.export("namespace", cfg.namespace)
pulumi.export("ksaName", storage.ksa_name)
pulumi.export("bucketName", storage.bucket_name)
pulumi.export("checkpointDir", DATA_MOUNT)
pulumi.export("rayClusterName", ray.cluster_name)
pulumi.export("rayHeadService", ray.head_service)
pulumi.export("rayDashboardPort", DASHBOARD_PORT)
pulumi.export("tpuGeneration", cfg.shape.generation.name)
pulumi.export("acceleratorType", cfg.shape.generation.ray_accelerator_type)
pulumi.export("topology", cfg.shape.topology)
pulumi.export("numSlices", cfg.num_slices)
pulumi.export("hostsPerSlice", cfg.shape.hosts)
pulumi.export("chipsPerHost", cfg.shape.chips_per_host)
pulumi.export("chipsPerSlice", cfg.shape.chips)
pulumi.export("spot", cfg.spot)
pulumi.export("elasticMinSlices", cfg.elastic_min_slices)
