"""The stack: DCN networks, a GKE cluster, one node pool per TPU slice, storage, and the RayCluster (or the spec of the one each run brings, and the queue its runs wait in).

Everything is driven by the stack's config (``Pulumi.<stack>.yaml``), validated
once by :func:`gke_ray_tpu.stack.parse.parse_stack_config` and planned once by
:func:`gke_ray_tpu.stack.plan.plan_stack` before any resource is registered; the
planned training run is checked next, then GkeRayCluster checks
what GKE offers (or the existing cluster) before it registers anything. The
exports are what ``python -m gke_ray_tpu.training.submit`` reads.
"""

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from gke_ray_tpu.components.dcn_networks import DcnNetworks
from gke_ray_tpu.components.gcs_workload_identity import GcsWorkloadIdentity
from gke_ray_tpu.components.gke_cluster import GkeRayCluster
from gke_ray_tpu.components.maxtext_run import MaxTextRun
from gke_ray_tpu.components.ray_manifests import DASHBOARD_PORT
from gke_ray_tpu.components.ray_tpu_cluster import RayTpuCluster, served_kuberay
from gke_ray_tpu.components.tpu_queue import TpuQueue
from gke_ray_tpu.components.tpu_slice_node_pool import TpuSliceNodePool
from gke_ray_tpu.components.worker_image import WorkerImage, check_build_daemon, will_build
from gke_ray_tpu.core.job_spec import bucket_url
from gke_ray_tpu.stack import wiring
from gke_ray_tpu.stack.checks import (
    check_cold_start, check_declared_runs, check_idle_cost, check_planned_run, check_queue_admits, check_ray_image,
    check_recreated_slices, check_waiting_cost, first_up,
)
from gke_ray_tpu.stack.component_keys import config_keys
from gke_ray_tpu.stack.parse import parse_stack_config, raw_pulumi_config
from gke_ray_tpu.stack.config import config_key
from gke_ray_tpu.stack.plan import plan_stack

cfg = parse_stack_config(raw_pulumi_config())
# The planned cluster and queue and each declared run's job, derived once: a run that cannot be built fails here.
plan = plan_stack(cfg)
# Sharding, HBM and cost of the planned training run, before any TPU is paid for.
check_planned_run(cfg, info=pulumi.log.info, warn=pulumi.log.warn)
# The runs this stack declares (applied as RayJobs): one that cannot shard or fit fails here.
declared = check_declared_runs(plan, info=pulumi.log.info)
# ... and one the stack's queue could never admit (it would wait for ever).
check_queue_admits(plan)
# What the stack costs idle and training, per capacity mode, and what this update starts, before anything is created.
pulumi.log.info(first_up(cfg, check_idle_cost(cfg, info=pulumi.log.info, warn=pulumi.log.warn), declared))
# Where runs wait in the queue: the most one can be billed while its slices do not all come, per capacity mode.
check_waiting_cost(plan, info=pulumi.log.info)
# What this update recreates, against the stack's own last outputs (none before its first update).
pulumi.StackReference(f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}").outputs.apply(
    lambda deployed: check_recreated_slices(cfg, deployed or {}, warn=pulumi.log.warn)
)
# A moving image tag runs unreviewed code with the bucket's rights at every Ray pod start.
check_ray_image(cfg, warn=pulumi.log.warn)
# What a run's TPU hosts pull and install before the first step, with or without the stack's image.
check_cold_start(cfg, info=pulumi.log.info)
if cfg.build_image and will_build():
    # The image is built where `pulumi up` runs (a preview builds nothing): without a daemon the provider can use
    # there, stop before anything is registered.
    check_build_daemon(
        f"or set {config_key('build_image')} false (the TPU workers then install the lock at every start; docs/image.md)"
    )
shape = cfg.shape

with config_keys(cfg):
    cluster = GkeRayCluster("gke", wiring.gke_cluster_args(cfg))
    in_cluster = pulumi.ResourceOptions(providers=[cluster.provider])

    slices = []
    if not cfg.autopilot:
        # Autopilot provisions TPU nodes itself (through the ComputeClass of
        # RayTpuCluster) and its accelerator network profile creates the DCN
        # networks, so only Standard stacks own networks and node pools.
        dcn_args = wiring.dcn_networks_args(cfg)
        networks = DcnNetworks("dcn", dcn_args).attachments if dcn_args else []
        slices = [
            TpuSliceNodePool(f"slice-{index}", wiring.node_pool_args(cfg, index, cluster.cluster, networks))
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
        wiring.workload_identity_args(cfg, project_number),
        opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=namespace_ready),
    )

    # The TPU workers' image: rayImage with the lock installed, in Artifact Registry (streamed to the nodes), run by
    # digest. The nodes pull it as the project's default compute service account, which the node pools run as.
    image = WorkerImage("worker-image", wiring.worker_image_args(cfg, project_number)) if cfg.build_image else None

    # The pods run as the identity's service account and mount its bucket: RayTpuCluster waits for both through them.
    # The node pools are no input of it (Autopilot has none), so it waits for them explicitly.
    # The cluster's KubeRay may be too old to keep what the stack sets (token auth, a run's deadline): its CRDs are
    # read first, at preview on an existing cluster, once the cluster exists on a new one.
    kuberay_key = "existing_cluster_name" if cfg.existing_cluster_name else "cluster_version"
    served = [served_kuberay("served-kuberay", getattr(cfg, kuberay_key), config_key(kuberay_key),
                             cfg.scale_to_zero_or_default, pulumi.ResourceOptions(provider=cluster.provider))]
    ray = RayTpuCluster(
        "ray", wiring.ray_cluster_args(cfg, storage, image),
        opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=slices + served),
    )
    # Where runs bring their own cluster, they wait in Kueue's queue for the stack's chips.
    queue_args = wiring.queue_args(cfg, ray)
    queue = TpuQueue("queue", queue_args, opts=in_cluster) if queue_args is not None else None

    # Each run (its RayJob and its code archive) waits for the RayCluster, or the spec of its own, through its name,
    # for its queue through the LocalQueue's, and for the read of the served KubeRay CRDs.
    runs = [MaxTextRun(f"run-{run.run_name}", wiring.run_args(cfg, index, ray, queue),
                       opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=served))
            for index, run in enumerate(cfg.runs)]

# What python -m gke_ray_tpu.training.submit reads (training/driver/stack_outputs.py checks them).
STACK_OUTPUTS = {
    "project": cfg.project,
    "region": cfg.region,
    "zone": cfg.zone_or_default,
    "clusterName": cluster.cluster_name,
    "clusterLocation": cluster.location,
    "clusterVersion": cluster.version,
    "namespace": cfg.namespace,
    "ksaName": storage.ksa_name,
    "bucketName": storage.bucket_name,
    "bucketHierarchicalNamespace": storage.hierarchical_namespace_enabled,
    "checkpointDir": storage.bucket_name.apply(bucket_url),
    "rayClusterName": ray.ray_cluster_name,
    "rayHeadService": ray.head_service,
    "rayDashboardPort": DASHBOARD_PORT,
    # The Ray pods' image: the stack's by digest (null when it runs rayImage as it is).
    "workerImage": image.ref if image else None,
    "tpuGeneration": shape.generation.name,
    "acceleratorType": shape.generation.ray_accelerator_type,
    "topology": shape.topology,
    "numSlices": cfg.num_slices,
    "hostsPerSlice": shape.hosts,
    "chipsPerHost": shape.chips_per_host,
    "chipsPerSlice": shape.chips,
    "capacity": cfg.capacity,
    "scaleToZero": cfg.scale_to_zero_or_default,
    # What every run of a scale-to-zero stack brings as its RayJob's rayClusterSpec (null on a held stack).
    "rayClusterSpec": ray.ray_cluster_spec,
    "elasticMinSlices": ray.ref["elastic_min_slices"],
    # The queue runs wait in (null on a held stack): the submit command labels each run for it and says where it is.
    "localQueue": queue.local_queue if queue else None,
    "clusterQueue": queue.cluster_queue if queue else None,
    "podsReadyTimeoutS": queue.pods_ready_timeout_s if queue else None,
    "requeueLimit": queue.requeue_limit if queue else None,
    "runs": [
        {"name": run.spec.run_name, "submissionId": run.submission_id, "checkpointDir": run.checkpoint_dir}
        for run in runs
    ],
}
for key, value in STACK_OUTPUTS.items():
    pulumi.export(key, value)
