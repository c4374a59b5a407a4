"""The stack: DCN networks, a GKE cluster, one node pool per TPU slice, storage, and the RayCluster (or the spec of the one each run brings).

Everything is driven by the stack's config (``Pulumi.<stack>.yaml``), validated
once by :func:`gke_ray_tpu.stack.config.parse_stack_config` before any resource is
registered; the planned training run is checked next, then GkeRayCluster checks
what GKE offers (or the existing cluster) before it registers anything. The
exports are what ``python -m gke_ray_tpu.training.submit`` reads.
"""

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from gke_ray_tpu.components.dcn_networks import DcnNetworks, DcnNetworksArgs
from gke_ray_tpu.components.gcs_workload_identity import GcsWorkloadIdentity, GcsWorkloadIdentityArgs
from gke_ray_tpu.components.gke_cluster import GkeRayCluster, GkeRayClusterArgs
from gke_ray_tpu.components.maxtext_run import MaxTextRun
from gke_ray_tpu.components.ray_manifests import DASHBOARD_PORT
from gke_ray_tpu.components.ray_tpu_cluster import RayTpuCluster, served_kuberay
from gke_ray_tpu.components.tpu_slice_node_pool import TpuSliceNodePool, TpuSliceNodePoolArgs
from gke_ray_tpu.components.worker_image import WorkerImage, WorkerImageArgs, check_build_daemon
from gke_ray_tpu.core.job_spec import bucket_url
from gke_ray_tpu.stack.component_keys import config_keys
from gke_ray_tpu.stack.cold_start import check_cold_start
from gke_ray_tpu.stack.config import config_key, parse_stack_config, raw_pulumi_config
from gke_ray_tpu.stack.preflight import check_declared_runs, check_idle_cost, check_planned_run, check_ray_image, check_recreated_slices

cfg = parse_stack_config(raw_pulumi_config())
# Sharding, HBM and cost of the planned training run, before any TPU is paid for.
check_planned_run(cfg, info=pulumi.log.info, warn=pulumi.log.warn)
# The runs this stack declares (applied as RayJobs): one that cannot shard or fit fails here.
check_declared_runs(cfg, info=pulumi.log.info)
# What the stack costs idle and training, per capacity mode, before anything is created.
check_idle_cost(cfg, info=pulumi.log.info, warn=pulumi.log.warn)
# What this update recreates, against the stack's own last outputs (none before its first update).
pulumi.StackReference(f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}").outputs.apply(
    lambda deployed: check_recreated_slices(cfg, deployed or {}, warn=pulumi.log.warn)
)
# A moving image tag runs unreviewed code with the bucket's rights at every Ray pod start.
check_ray_image(cfg, warn=pulumi.log.warn)
# What a run's TPU hosts pull and install before the first step, with or without the stack's image.
check_cold_start(cfg, info=pulumi.log.info)
if cfg.build_image:
    # The image is built where `pulumi up` runs: without a daemon there, stop before anything is registered.
    check_build_daemon(
        f"or set {config_key('build_image')} false (the TPU workers then install the lock at every start; docs/image.md)"
    )
shape = cfg.shape
cidrs = cfg.dcn_cidrs_or_default

with config_keys(cfg):
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
            scale_to_zero=cfg.scale_to_zero_or_default,
            enable_multi_networking=cfg.enable_multi_networking,
            ray_cluster_logging=cfg.ray_cluster_logging,
            ray_cluster_monitoring=cfg.ray_cluster_monitoring,
            dranet=bool(cidrs),
            existing=bool(cfg.existing_cluster_name),
            image_streaming=cfg.image_streaming,
        ),
    )
    in_cluster = pulumi.ResourceOptions(providers=[cluster.provider])

    slices = []
    if not cfg.autopilot:
        # Autopilot provisions TPU nodes itself (through the ComputeClass of
        # RayTpuCluster) and its accelerator network profile creates the DCN
        # networks, so only Standard stacks own networks and node pools.
        dcn = (
            DcnNetworks("dcn", DcnNetworksArgs(region=cfg.region, name_prefix=cfg.cluster_name, cidrs=cidrs, project=cfg.project))
            if cidrs
            else None
        )
        slices = [
            TpuSliceNodePool(
                f"slice-{index}",
                TpuSliceNodePoolArgs(
                    cluster=cluster.cluster,
                    zone=cfg.zone_or_default,
                    generation=shape.generation.name,
                    topology=shape.topology,
                    slice_index=index,
                    additional_networks=dcn.attachments if dcn else [],
                    capacity=cfg.capacity,
                    scale_to_zero=cfg.scale_to_zero_or_default,
                    image_streaming=cfg.image_streaming,
                    **({"reservation": cfg.reservation} if cfg.reservation else {}),
                    **({"max_run_duration_s": cfg.max_run_duration} if cfg.max_run_duration else {}),
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
            hierarchical_namespace=cfg.bucket_hierarchical_namespace,
        ),
        opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=namespace_ready),
    )

    # The TPU workers' image: rayImage with the lock installed, in Artifact Registry (streamed to the nodes), run by
    # digest. The nodes pull it as the project's default compute service account, which the node pools run as.
    image = WorkerImage(
        "worker-image",
        WorkerImageArgs(
            project=cfg.project,
            location=cfg.region,
            repository=cfg.image_repository,
            existing_repository=bool(cfg.existing_image_repository),
            base_image=cfg.ray_image,
            readers=[pulumi.Output.from_input(project_number).apply(
                lambda number: f"serviceAccount:{number}-compute@developer.gserviceaccount.com"
            )],
        ),
    ) if cfg.build_image else None

    # The pods run as the identity's service account and mount its bucket: RayTpuCluster waits for both through them.
    # The node pools are no input of it (Autopilot has none), so it waits for them explicitly.
    # An existing cluster's KubeRay may be too old to keep token auth: read its CRD now, at preview too.
    served = [
        served_kuberay("served-raycluster-crd", cfg.existing_cluster_name, config_key("existing_cluster_name"),
                       pulumi.ResourceOptions(provider=cluster.provider))
    ] if cfg.existing_cluster_name else []
    ray = RayTpuCluster(
        "ray", cfg.ray_cluster_args(storage, image),
        opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=slices + served),
    )

    # Each run (its RayJob and its code archive) waits for the RayCluster, or the spec of its own, through its name.
    runs = [MaxTextRun(f"run-{run.run_name}", cfg.run_args(index, ray), opts=in_cluster) for index, run in enumerate(cfg.runs)]

pulumi.export("project", cfg.project)
pulumi.export("region", cfg.region)
pulumi.export("zone", cfg.zone_or_default)
pulumi.export("clusterName", cluster.cluster_name)
pulumi.export("clusterLocation", cluster.location)
pulumi.export("clusterVersion", cluster.version)
pulumi.export("namespace", cfg.namespace)
pulumi.export("ksaName", storage.ksa_name)
pulumi.export("bucketName", storage.bucket_name)
pulumi.export("bucketHierarchicalNamespace", storage.hierarchical_namespace_enabled)
pulumi.export("checkpointDir", storage.bucket_name.apply(bucket_url))
pulumi.export("rayClusterName", ray.ray_cluster_name)
pulumi.export("rayHeadService", ray.head_service)
pulumi.export("rayDashboardPort", DASHBOARD_PORT)
# The Ray pods' image: the stack's by digest (null when it runs rayImage as it is).
pulumi.export("workerImage", image.ref if image else None)
pulumi.export("tpuGeneration", shape.generation.name)
pulumi.export("acceleratorType", shape.generation.ray_accelerator_type)
pulumi.export("topology", shape.topology)
pulumi.export("numSlices", cfg.num_slices)
pulumi.export("hostsPerSlice", shape.hosts)
pulumi.export("chipsPerHost", shape.chips_per_host)
pulumi.export("chipsPerSlice", shape.chips)
pulumi.export("capacity", cfg.capacity)
pulumi.export("scaleToZero", cfg.scale_to_zero_or_default)
# What every run of a scale-to-zero stack brings as its RayJob's rayClusterSpec (null on a held stack).
pulumi.export("rayClusterSpec", ray.ray_cluster_spec)
pulumi.export("elasticMinSlices", ray.ref["elastic_min_slices"])
pulumi.export("runs", [
    {"name": run.spec.run_name, "submissionId": run.submission_id, "checkpointDir": run.checkpoint_dir} for run in runs
])
