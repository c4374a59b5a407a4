"""The config's rules across keys: what no single key's rule can see (a multi-host topology for Multislice, a zone
of the region, a capacity mode GKE offers for the generation and cluster mode, the GKE version floors, names the
stack derives from two keys, the queue's keys only where runs bring their own cluster).

:func:`check_across_keys` runs after every key passed its own rule (``gke_ray_tpu.stack.parse.parse_stack_config``);
each failure names the key to change.
"""

from __future__ import annotations

from gke_ray_tpu.components import dcn_networks, gcs_workload_identity, gke_cluster, tpu_queue, tpu_slice_node_pool
from gke_ray_tpu.core import capacity as capacity_rules, gke, kueue, naming, slices
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.config import StackConfig, config_key


def check_across_keys(cfg: StackConfig) -> None:
    """Raises ConfigError on the first rule the keys break together."""
    shape = cfg.shape
    if cfg.num_slices > 1 and not shape.multi_host:
        raise ConfigError(
            config_key("tpu_topology"),
            shape.topology,
            f"a multi-host topology: GKE Multislice ({cfg.num_slices} slices) needs multi-host slices",
        )
    slices.elastic_min_slices(cfg.elastic_min_slices, cfg.num_slices, config_key("elastic_min_slices"))
    if cfg.zone is not None and not cfg.zone.startswith(cfg.region + "-"):
        raise ConfigError("gcp:zone", cfg.zone, f"a zone of gcp:region {cfg.region} (like {cfg.region}-b)")
    capacity_rules.check_capacity(
        cfg.capacity, cfg.reservation, cfg.scale_to_zero_or_default, cfg.max_run_duration, shape.generation,
        key=lambda name: config_key({"max_run_duration_s": "max_run_duration"}.get(name, name)),
    )
    if cfg.autopilot:
        capacity_rules.check_autopilot_capacity(cfg.capacity, config_key("capacity"))
    _queue_keys(cfg)
    if not cfg.existing_cluster_name:
        version = gke.parse_version(cfg.cluster_version, config_key("cluster_version"))
        gke.check_gcs_fuse_floor(version, config_key("cluster_version"))
        if cfg.capacity == "flex-start":
            gke.check_flex_start_floor(version, config_key("cluster_version"))
    gke_cluster.check_release_channel(cfg.cluster_mode, cfg.release_channel, config_key("release_channel"))
    cidrs = cfg.dcn_cidrs_or_default
    tpu_slice_node_pool.check_network_count(shape, len(cidrs), list(cidrs), config_key("dcn_cidrs"))
    if cidrs and not cfg.existing_cluster_name:
        gke.check_dranet_floor(
            cfg.cluster_mode, gke.parse_version(cfg.cluster_version, config_key("cluster_version")), config_key("cluster_version")
        )
    if not cfg.autopilot:
        dcn_networks.check_name_prefix(cfg.cluster_name, len(cidrs), key=config_key("cluster_name"))
    gcs_workload_identity.check_subject(cfg.namespace, cfg.ksa_name, config_key("ksa_name"))
    name_rule = naming.RAY_TPU_CLUSTER_NAME if shape.multi_host else naming.RAY_CLUSTER_NAME
    name_rule.check(cfg.ray_cluster_name, config_key("ray_cluster_name"))
    if cfg.existing_image_repository and not cfg.build_image:
        raise ConfigError(
            config_key("existing_image_repository"), cfg.existing_image_repository,
            f"unset: nothing is pushed while {config_key('build_image')} is false",
        )


_QUEUE_KEYS = ("install_kueue", "pods_ready_timeout", "requeue_limit", "queueing_strategy", "cohort",
               "borrowing_limit", "lending_limit", "queued_provisioning")
"""The keys of the runs' queue (a TpuQueue's arguments)."""


def _queue_keys(cfg: StackConfig) -> None:
    """The queue's keys apply where runs bring their own cluster (the stack then has a TpuQueue, whose Kueue
    objects are named after the RayTpuCluster and its namespace)."""
    if cfg.scale_to_zero_or_default:
        kueue.queue_names(cfg.ray_cluster_name, cfg.namespace, config_key("ray_cluster_name"))
        if cfg.queued_provisioning:
            tpu_queue.check_queued_provisioning(cfg.capacity, cfg.num_slices, config_key("queued_provisioning"))
        return
    for field in _QUEUE_KEYS:
        if field in cfg.model_fields_set:
            raise ConfigError(config_key(field), getattr(cfg, field),
                              f"unset on a stack that holds its slices: its runs go to its RayCluster, no queue "
                              f"(set {config_key('scale_to_zero')} true for runs that each bring a cluster and queue)")
