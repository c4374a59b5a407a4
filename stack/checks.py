"""Preview's checks of the stack: its config read, the preflight reports of its runs (``gke_ray_tpu.preflight``)
made for its slices, and the stack's own warnings.

``pulumi preview`` (through ``__main__.py``) and the offline preview (``python -m gke_ray_tpu.stack.preview``) call
these. What a run needs and costs, and how that is worded, is :mod:`gke_ray_tpu.preflight`'s; here the config's
keys name what the reports find: a declared run that cannot shard or fit fails preview under ``gke-ray-tpu:runs[i]``.
"""

from __future__ import annotations

import json
from typing import Callable, Mapping, Optional

from gke_ray_tpu.components import gke_cluster, tpu_queue
from gke_ray_tpu.components.ray_manifests import is_moving_tag, ray_cluster_spec
from gke_ray_tpu.core import kueue, kueue_waiting
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import COMPILATION_CACHE_DIR, JobSpec, bucket_url, build_job
from gke_ray_tpu.core.maxtext import Value
from gke_ray_tpu.core.presets import DEFAULT_PRESET, get_preset
from gke_ray_tpu.core.prices import cpu_machine_usd_per_hour
from gke_ray_tpu.core.ray_job import SUBMISSION_MODE, with_slices
from gke_ray_tpu.preflight import cold_start, report as run_report
from gke_ray_tpu.preflight.cost import (
    CapacityCost, WaitingCostRow, capacity_costs, capacity_modes, first_up as cost_first_up, format_capacity_costs,
    format_waiting_costs, waiting_costs,
)
from gke_ray_tpu.preflight.report import PreflightReport
from gke_ray_tpu.stack.component_keys import config_keys
from gke_ray_tpu.stack.config import StackConfig, config_key
from gke_ray_tpu.stack.plan import StackPlan


def check_run(
    cfg: StackConfig, maxtext: Mapping[str, object], elastic: bool = False, min_slices: Optional[int] = None
) -> PreflightReport:
    """A MaxText key/value config against the stack's slices (``gke_ray_tpu.preflight.report.check_run``).

    ``elastic``: the run must also map onto every smaller slice count down to
    ``min_slices`` (default ``elasticMinSlices``), because Ray Train may restart it on fewer slices.
    """
    low = (min_slices or cfg.elastic_min_slices_or_default) if elastic else cfg.num_slices
    return run_report.check_run(maxtext, cfg.shape, cfg.num_slices, low, region=cfg.region,
                                spot=cfg.capacity_mode.spot, compile_key=config_key("compile_check"))


def planned_job(
    cfg: StackConfig, preset_name: Optional[str], overrides: Mapping[str, Value], key: str = config_key("planned_preset")
) -> JobSpec:
    """The planned run as the submit command would build it for the stack's slices: what the compile check compiles."""
    preset = get_preset(preset_name or DEFAULT_PRESET, key=key)
    return build_job(
        preset,
        base_output_directory=bucket_url(cfg.bucket_name) + "/",
        run_name=preset.run_name,
        slices=cfg.num_slices,
        overrides=overrides,
        generation=cfg.tpu_generation,
        topology=cfg.tpu_topology,
        spot=cfg.capacity_mode.spot,
        compilation_cache_dir=COMPILATION_CACHE_DIR,
    )


def check_planned_run(cfg: StackConfig, info: Callable[[str], None], warn: Callable[[str], None]) -> PreflightReport:
    """The preview-time check: the stack's planned run (``plannedPreset``) against its slices.

    A mismatch fails preview when the stack chose its preset explicitly; with the
    default preset it is only a warning, since that run may not be what this
    stack is for.
    """
    maxtext, elastic = run_report.planned_run(cfg.planned_preset, cfg.planned_overrides, config_key("planned_preset"))
    report = check_run(cfg, maxtext, elastic=elastic)
    for warning in report.warnings:
        warn(warning)
    if report.errors and cfg.planned_preset:
        raise report.errors[0]
    for error in report.errors:
        warn(f"the default planned run ({DEFAULT_PRESET}) does not map onto these slices: {error}")
    info(report.format())
    return report


def check_declared_runs(plan: StackPlan, info: Callable[[str], None]) -> list[PreflightReport]:
    """Each run of ``gke-ray-tpu:runs``: its sharding, HBM and cost, at preview.

    These runs are applied by ``pulumi up``, so one that cannot shard or does
    not fit the chip's HBM fails preview; the breakdown and the cost are
    printed for the review. With ``compileCheck`` XLA's compiler decides
    whether it fits (:mod:`gke_ray_tpu.preflight.xla_check`); otherwise the estimate does, and
    only when it is sure.
    """
    cfg = plan.cfg
    reports = []
    for index, (run, job) in enumerate(zip(cfg.runs, plan.jobs)):
        key = f"{config_key('runs')}[{index}]"
        report = check_run(cfg, job.maxtext, elastic=job.elastic, min_slices=job.min_slices)
        refusal = run_report.declared_run_refusal(report, cfg.shape, key, run.run_name, config_key("compile_check"),
                                                  compiled=cfg.compile_check)
        if refusal is not None:
            raise refusal
        text = report.format()
        if cfg.compile_check:
            text += "\n" + run_report.compiled_verdict(job, plan.pod_flags, report, key, run.run_name,
                                                        config_key("compile_check"))
        info(f"Declared run {run.run_name} (preset {run.preset}):\n" + text)
        reports.append(report)
    return reports


def check_queue_admits(plan: StackPlan, objects: Optional[tpu_queue.QueueObjects] = None) -> None:
    """Each declared run, and each run the submit command can make, against the stack's queue (``objects``: its
    Kueue objects, by default the ones the stack declares): a run Kueue could never admit, at its full size, would
    wait for ever, so it fails preview under its key (``components.tpu_queue.queue_problem``)."""
    cfg, queue, spec = plan.cfg, plan.queue_args, plan.cluster_spec
    if queue is None:
        return
    with config_keys(cfg):  # the queue's own rules (a limit without a cohort) name the user's key
        tpu_queue.check_args(queue)
        if objects is None:
            names = kueue.queue_names(spec.name, spec.namespace, config_key("ray_cluster_name"))
            objects = tpu_queue.queue_objects(queue, spec, names)
    cluster = ray_cluster_spec(spec)
    name = objects.cluster_queue["metadata"]["name"]
    for index, (run, job) in enumerate(zip(cfg.runs, plan.jobs)):
        problem = tpu_queue.queue_problem(objects, with_slices(cluster, job.slices, job.min_slices))
        if problem:
            raise ConfigError(f"{config_key('runs')}[{index}]", run.run_name,
                              f"a run ClusterQueue {name} can admit: {problem}")
    for slices, start in tpu_queue.submitted_runs(spec):
        problem = tpu_queue.queue_problem(objects, with_slices(cluster, slices, start))
        if problem:
            key, value = ("elastic_min_slices", spec.elastic_min_slices) if start else ("num_slices", spec.num_slices)
            raise ConfigError(config_key(key), value, f"a stack whose ClusterQueue {name} admits every run the submit "
                              f"command can make; it never admits --slices {slices}"
                              f"{f' --elastic (from {start})' if start else ''}: {problem}")


def stack_costs(cfg: StackConfig) -> list[CapacityCost]:
    """The stack under every capacity mode its TPU generation allows (the CPU pool and the fee only where the stack owns them).

    Held, the CPU pool runs all its nodes; scaled to zero, the system pool's node stays and the pool of Ray heads
    has one node while one run trains, none while no run exists (GkeRayCluster)."""
    owned = not (cfg.autopilot or cfg.existing_cluster_name)
    cpu = cpu_machine_usd_per_hour(cfg.cpu_machine_type) if owned else None
    system = cpu_machine_usd_per_hour(gke_cluster.SYSTEM_MACHINE_TYPE) * gke_cluster.SYSTEM_NODE_COUNT if owned else None
    return capacity_costs(
        cfg.shape, cfg.num_slices, cfg.region,
        scale_to_zero=cfg.scale_to_zero_or_default,
        cpu_usd_per_hour=None if cpu is None else cpu * cfg.cpu_node_count,
        cluster_fee=not cfg.existing_cluster_name,
        modes=capacity_modes(cfg.shape),
        region_key="gcp:region",
        per_run_cpu_usd_per_hour=(system, None if cpu is None else system + cpu),
    )


def check_idle_cost(cfg: StackConfig, info: Callable[[str], None], warn: Callable[[str], None]) -> list[CapacityCost]:
    """Print what the stack costs idle and training per capacity mode; warn when it holds slices nothing declared uses."""
    try:
        costs = stack_costs(cfg)
    except ConfigError as error:
        warn(f"no cost per capacity mode: {error}")
        return []
    if cfg.autopilot:
        pool = "the Ray head's Autopilot pod not priced"
    elif cfg.existing_cluster_name:
        pool = "the existing cluster's nodes and fee not counted"
    elif cpu_machine_usd_per_hour(cfg.cpu_machine_type) is None:
        pool = f"CPU pool of {cfg.cpu_machine_type} not priced (N1/N2 standard and highmem are)"
    elif cfg.scale_to_zero_or_default:
        head = cpu_machine_usd_per_hour(cfg.cpu_machine_type)
        pool = (
            f"system pool {gke_cluster.SYSTEM_NODE_COUNT} x {gke_cluster.SYSTEM_MACHINE_TYPE} "
            f"${cpu_machine_usd_per_hour(gke_cluster.SYSTEM_MACHINE_TYPE):,.2f}/h, Ray head pool 0-{cfg.cpu_node_count} x "
            f"{cfg.cpu_machine_type} (${head:,.2f}/h per running run), GKE fee $0.10/h"
        )
    else:
        pool = f"CPU pool {cfg.cpu_node_count} x {cfg.cpu_machine_type} ${costs[0].cpu_usd_per_hour:,.2f}/h, GKE fee $0.10/h"
    what = f"{cfg.num_slices} x {cfg.shape.pod_type} = {cfg.num_slices * cfg.shape.chips} chips in {cfg.region}; {pool}"
    info(format_capacity_costs(costs, cfg.capacity, what))
    chosen = next(cost for cost in costs if cost.capacity == cfg.capacity)
    if chosen.slices_billed_idle and cfg.capacity != "reservation" and not cfg.runs:
        warn(
            f"this stack holds its {cfg.num_slices * cfg.shape.chips} TPU chips while no run is declared: "
            f"${chosen.idle_usd_per_hour:,.2f}/hour idle (${chosen.idle_usd_per_month:,.0f} a month); set "
            f"{config_key('scale_to_zero')} true to pay for slices only while a run trains (each run then waits "
            "minutes for its slices)"
        )
    return costs


def check_waiting_cost(plan: StackPlan, info: Callable[[str], None]) -> list[WaitingCostRow]:
    """Where runs bring their own cluster and wait in the stack's queue: per capacity mode, the most a run of all
    the stack's slices can be billed while it waits for slices that do not all come
    (``gke_ray_tpu.preflight.cost.waiting_costs``, with the stack's Kueue settings). Nothing on a stack that holds
    its slices."""
    cfg, queue = plan.cfg, plan.queue_args
    if queue is None:
        return []
    wait = tpu_queue.wait_settings(queue) or kueue_waiting.WaitSettings(requeue_limit=None)
    try:
        rows = waiting_costs(cfg.shape, cfg.num_slices, cfg.region, wait, queued_provisioning=cfg.queued_provisioning,
                             generation_key=config_key("tpu_generation"), region_key="gcp:region")
    except ConfigError as error:
        info(f"Waiting for slices: not priced ({error})")
        return []
    info(format_waiting_costs(rows, cfg.capacity, cfg.shape, cfg.num_slices, cfg.region, wait))
    return rows


def check_recreated_slices(cfg: StackConfig, deployed: Mapping[str, object], warn: Callable[[str], None]) -> None:
    """Warn when the config changes what the deployed stack's TPU node pools are made of (its last outputs:
    ``deployed``): GKE cannot change a pool's VMs in place, so each pool is deleted and created again (first
    deleted: the names are fixed) and whatever runs on its slices stops."""
    shape = cfg.shape
    now = {
        "capacity": (cfg.capacity, "capacity"),
        "scaleToZero": (cfg.scale_to_zero_or_default, "scale_to_zero"),
        "tpuGeneration": (shape.generation.name, "tpu_generation"),
        "topology": (shape.topology, "tpu_topology"),
    }

    def shown(value: object) -> str:
        return json.dumps(value) if isinstance(value, bool) else str(value)  # as Pulumi config spells it

    changed = [
        f"{config_key(field)} {shown(deployed[output])} -> {shown(value)}"
        for output, (value, field) in now.items()
        if deployed.get(output) is not None and deployed[output] != value
    ]
    if changed:
        pools = "its TPU node pools are deleted and created again (GKE changes no VM in place)"
        if cfg.autopilot:
            pools = "Autopilot provisions its slices anew"
        warn(
            f"{', '.join(changed)}: {pools}, and the RayCluster changes with them; every run on the slices stops "
            "now (a run resumes from its last checkpoint when submitted again). Stop or let finish the runs first."
        )


def check_ray_image(cfg: StackConfig, warn: Callable[[str], None]) -> None:
    """Warn when the Ray pods' image is a moving tag: each pod start may run a build nobody reviewed, with the
    bucket's rights, and a new Ray may change defaults (token auth) under the stack."""
    if is_moving_tag(cfg.ray_image):
        warn(
            f"{config_key('ray_image')} {cfg.ray_image} is a moving tag: every Ray pod start pulls whatever was "
            "last pushed under it and runs it with the bucket's rights; pin a release tag or a digest you tested "
            "(docs/security.md)"
        )


def check_cold_start(cfg: StackConfig, info: Callable[[str], None]) -> None:
    """What the stack's TPU hosts pull and install before a run's first step, and what the chips cost meanwhile."""
    info(cold_start.cold_start(cfg.shape, cfg.num_slices, cfg.region, spot=cfg.capacity == "spot", built=cfg.build_image,
                               scale_to_zero=cfg.scale_to_zero_or_default))


def first_up(cfg: StackConfig, costs: list[CapacityCost], declared: list[PreflightReport]) -> str:
    """What the stack's first ``pulumi up`` starts and what that costs (``declared``: the runs' reports, from
    :func:`check_declared_runs`)."""
    runs = [(run.run_name, run.preset, report.cost) for run, report in zip(cfg.runs, declared)]
    return cost_first_up(cfg.shape, cfg.num_slices, cfg.capacity, cfg.scale_to_zero_or_default, costs, runs,
                         config_key("runs"))
