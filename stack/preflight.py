"""Preflight: does a planned MaxText run fit the stack's slices, and what will it cost?

One function, :func:`preflight`, used by ``pulumi preview`` (through
``__main__.py``) and by the offline preview (``python -m gke_ray_tpu.stack.preview``). Sharding that cannot
map onto the slices is an error (the job would fail at step 0 after the TPUs
are paid for); an HBM estimate over the chip's memory is a warning, because it
is an estimate; the cost is information.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from gke_ray_tpu.components.ray_manifests import is_moving_tag, ray_cluster_spec
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core import kueue
from gke_ray_tpu.core.capacity import CAPACITY, CAPACITY_MODES
from gke_ray_tpu.preflight.cost import CostEstimate, estimate_cost
from gke_ray_tpu.preflight.flops import estimate_step_time
from gke_ray_tpu.preflight.memory import estimate_hbm_from_config, HbmBreakdown
from gke_ray_tpu.core.sharding import check_sharding
from gke_ray_tpu.preflight.cost import CapacityCost, capacity_costs, format_capacity_costs
from gke_ray_tpu.core.prices import chip_price, cpu_machine_usd_per_hour
from gke_ray_tpu.core.maxtext import BASE_DEFAULTS, Value
from gke_ray_tpu.core.job_spec import COMPILATION_CACHE_DIR, JobSpec, bucket_url, build_job
from gke_ray_tpu.core.ray_job import SUBMISSION_MODE, with_slices
from gke_ray_tpu.core.parallelism import check_elastic
from gke_ray_tpu.core.presets import DEFAULT_PRESET, get_preset
from gke_ray_tpu.components import gke_cluster, tpu_queue
from gke_ray_tpu.preflight import xla_check
from gke_ray_tpu.stack import wiring
from gke_ray_tpu.stack.component_keys import config_keys
from gke_ray_tpu.stack.config import StackConfig, config_key


@dataclass
class PreflightReport:
    slice_counts: tuple[int, ...]
    errors: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    hbm: Optional[HbmBreakdown] = None
    cost: Optional[CostEstimate] = None

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def estimate_by_slices(self) -> dict[int, float]:
        """The HBM estimate's total per JAX device (as XLA's figures are), for the one slice count it is made for
        (the largest)."""
        return {} if self.hbm is None else {max(self.slice_counts): self.hbm.total_per_device_gib}

    def format(self) -> str:
        counts = ", ".join(str(n) for n in self.slice_counts)
        lines = [f"Sharding over {counts} slice(s): " + ("OK" if self.ok else "MISMATCH")]
        lines += [f"  error: {error}" for error in self.errors]
        if self.hbm is not None:
            lines.append(self.hbm.format())
        if self.cost is not None:
            lines.append(self.cost.format())
        lines += [f"warning: {warning}" for warning in self.warnings]
        return "\n".join(lines)


def preflight(
    cfg: StackConfig, maxtext: Mapping[str, object], elastic: bool = False, min_slices: Optional[int] = None
) -> PreflightReport:
    """Check a MaxText key/value config against the stack's slices.

    ``elastic``: the run must also map onto every smaller slice count down to
    ``min_slices`` (default ``elasticMinSlices``), because Ray Train may restart it on fewer slices.
    """
    low = (min_slices or cfg.elastic_min_slices_or_default) if elastic else cfg.num_slices
    report = PreflightReport(slice_counts=tuple(range(cfg.num_slices, low - 1, -1)))
    try:
        devices = cfg.shape.chips * cfg.shape.generation.jax_devices_per_chip
        check_elastic(maxtext, devices, low, cfg.num_slices, slice_name=f"{cfg.shape.pod_type} slice")
        check_sharding(maxtext, cfg.shape, report.slice_counts, f"{cfg.shape.pod_type} slice")
    except ConfigError as error:
        report.errors.append(error)
        return report

    try:
        report.hbm = estimate_hbm_from_config(maxtext, cfg.shape, cfg.num_slices)
    except ConfigError as error:
        report.warnings.append(f"no HBM estimate: {error}")
    else:
        if report.hbm.does_not_fit:
            report.warnings.append(
                f"estimated {report.hbm.total_gib:.2f} GiB per chip exceeds the usable "
                f"{report.hbm.usable_gib:.2f} GiB of a {cfg.shape.generation.name} chip: "
                "expect out-of-memory at compile time"
            )
        elif not report.hbm.fits:
            report.warnings.append(
                f"estimated {report.hbm.total_gib:.2f} GiB per chip is within the estimate's error of XLA's "
                f"{report.hbm.usable_gib:.2f} GiB limit on a {cfg.shape.generation.name} chip: uncertain, run the "
                f"compile check (python -m gke_ray_tpu.stack.preview --section training --compile; for declared runs "
                f"{config_key('compile_check')} true)"
            )

    model = maxtext.get("model_name")
    steps = maxtext.get("steps")
    if isinstance(model, str) and isinstance(steps, int):
        try:
            values = {**BASE_DEFAULTS, **maxtext}
            step = estimate_step_time(
                model, cfg.shape, float(values["per_device_batch_size"]), int(values["max_target_length"])
            )
            report.cost = estimate_cost(
                cfg.shape, cfg.num_slices, steps, step, spot=cfg.capacity_mode.spot, region=cfg.region
            )
        except ConfigError as error:
            report.warnings.append(f"no cost estimate: {error}")
    return report


def planned_run(
    preset_name: Optional[str], overrides: Mapping[str, Value], key: str = config_key("planned_preset")
) -> tuple[dict[str, Value], bool]:
    """The MaxText settings of a training preset with overrides, and whether it is elastic."""
    preset = get_preset(preset_name or DEFAULT_PRESET, key=key)
    return {**preset.maxtext, **overrides}, preset.elastic


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
    maxtext, elastic = planned_run(cfg.planned_preset, cfg.planned_overrides)
    report = preflight(cfg, maxtext, elastic=elastic)
    for warning in report.warnings:
        warn(warning)
    if report.errors and cfg.planned_preset:
        raise report.errors[0]
    for error in report.errors:
        warn(f"the default planned run ({DEFAULT_PRESET}) does not map onto these slices: {error}")
    info(report.format())
    return report


def check_declared_runs(cfg: StackConfig, info: Callable[[str], None]) -> list[PreflightReport]:
    """Each run of ``gke-ray-tpu:runs``: its sharding, HBM and cost, at preview.

    These runs are applied by ``pulumi up``, so one that cannot shard or does
    not fit the chip's HBM fails preview; the breakdown and the cost are
    printed for the review. With ``compileCheck`` XLA's compiler decides
    whether it fits (:mod:`gke_ray_tpu.preflight.xla_check`); otherwise the estimate does, and
    only when it is sure.
    """
    reports = []
    for index, run in enumerate(cfg.runs):
        job = cfg.declared_job(index)
        key = f"{config_key('runs')}[{index}]"
        report = preflight(cfg, job.maxtext, elastic=job.elastic, min_slices=job.min_slices)
        if report.errors:
            raise report.errors[0].renamed(key)
        text = report.format()
        if cfg.compile_check:
            text += "\n" + _compiled(cfg, job, key, run.run_name, report)
        elif report.hbm is not None and report.hbm.does_not_fit:
            raise ConfigError(
                key, run.run_name,
                f"a run that fits the chips: estimated {report.hbm.total_gib:.2f} GiB per chip, "
                f"{report.hbm.usable_gib:.2f} GiB usable on {cfg.shape.generation.name} "
                "(lower per_device_batch_size, bfloat16 weights, remat_policy full, more fsdp; or "
                f"{config_key('compile_check')} true for XLA's own verdict)",
            )
        info(f"Declared run {run.run_name} (preset {run.preset}):\n" + text)
        reports.append(report)
    return reports


def check_queue_admits(cfg: StackConfig, capacity: Optional[kueue.QueueCapacity] = None) -> None:
    """Each declared run against the stack's queue (``capacity``: its ClusterQueue's, by default the one the stack
    declares): a run Kueue could never admit, at its full size, would wait for ever, so it fails preview under
    its key. A declared run asks for the stack's slices, the queue's quota, so this holds unless the queue is
    another's (``core.kueue.check_admissible``)."""
    queue = wiring.queue_args(cfg, wiring.planned_ray_cluster(cfg))
    if queue is None:
        return
    spec = wiring.planned_cluster_spec(cfg)
    with config_keys(cfg):  # the queue's own rules (a limit without a cohort) name the user's key
        tpu_queue.check_args(queue)
        installed = tpu_queue.wait_settings(queue) is not None
        if capacity is None:
            names = kueue.queue_names(spec.name, spec.namespace, config_key("ray_cluster_name"))
            declared = kueue.cluster_queue(names, spec.namespace, tpu_queue.quota(spec, count_host=not installed),
                                           sharing=tpu_queue.sharing(queue))
            capacity = kueue.queue_capacity(declared)
    for index, run in enumerate(cfg.runs):
        job = cfg.declared_job(index)
        cluster = with_slices(ray_cluster_spec(spec), job.slices)
        asked = kueue.usage(kueue.ray_job_pod_sets({"spec": {"submissionMode": SUBMISSION_MODE,
                                                             "rayClusterSpec": cluster}}))
        kueue.check_admissible(asked, capacity, f"{config_key('runs')}[{index}]", run.run_name,
                               ignore_undeclared=installed)


def _compiled(cfg: StackConfig, job: JobSpec, key: str, name: str, report: PreflightReport) -> str:
    """XLA's figures for a declared run at each slice count it may train on, under the pods' flags;
    a run XLA does not compile at some count fails preview under its key, naming the count."""
    try:
        results = xla_check.check_job(job, wiring.planned_pod_flags(cfg), report.slice_counts)
    except xla_check.CompileCheckError as error:
        raise ConfigError(config_key("compile_check"), True, f"a compile check that can run here: {error}") from None
    if not results.fits:
        counts = ", ".join(str(n) for n in sorted(report.slice_counts))
        raise ConfigError(
            key, name, f"a run XLA compiles within the chips' HBM at each slice count it may train on ({counts}): "
            + results.refusal(),
        )
    return results.format(report.estimate_by_slices)


def stack_costs(cfg: StackConfig) -> list[CapacityCost]:
    """The stack under every capacity mode its TPU generation allows (the CPU pool and the fee only where the stack owns them).

    Held, the CPU pool runs all its nodes; scaled to zero, the system pool's node stays and the pool of Ray heads
    has one node while one run trains, none while no run exists (GkeRayCluster)."""
    owned = not (cfg.autopilot or cfg.existing_cluster_name)
    cpu = cpu_machine_usd_per_hour(cfg.cpu_machine_type) if owned else None
    system = cpu_machine_usd_per_hour(gke_cluster.SYSTEM_MACHINE_TYPE) * gke_cluster.SYSTEM_NODE_COUNT if owned else None
    modes = tuple(mode for mode in CAPACITY_MODES if mode != "flex-start" or cfg.shape.generation.flex_start)
    return capacity_costs(
        cfg.shape, cfg.num_slices, cfg.region,
        scale_to_zero=cfg.scale_to_zero_or_default,
        cpu_usd_per_hour=None if cpu is None else cpu * cfg.cpu_node_count,
        cluster_fee=not cfg.existing_cluster_name,
        modes=modes,
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


def check_waiting_cost(cfg: StackConfig, info: Callable[[str], None]) -> list[WaitingCostRow]:
    """Where runs bring their own cluster and wait in the stack's queue: per capacity mode, the most a run of all
    the stack's slices can be billed while it waits for slices that do not all come (``core.kueue.waiting_cost``,
    with the stack's Kueue settings and its chip price). Nothing on a stack that holds its slices."""
    queue = wiring.queue_args(cfg, wiring.planned_ray_cluster(cfg))
    if queue is None:
        return []
    wait = tpu_queue.wait_settings(queue) or kueue.WaitSettings(requeue_limit=None)
    try:
        price = chip_price(cfg.tpu_generation, cfg.region, generation_key=config_key("tpu_generation"),
                           region_key="gcp:region")
    except ConfigError as error:
        info(f"Waiting for slices: not priced ({error})")
        return []
    modes = [mode for mode in CAPACITY_MODES if mode != "flex-start" or cfg.shape.generation.flex_start]
    rows = [waiting_cost_row(cfg, mode, wait, price.usd_per_chip_hour(CAPACITY[mode].spot)) for mode in modes]
    settings = (f"Kueue's {wait.timeout_s} s PodsReady timeout, "
                + (f"{wait.requeue_limit} requeue{'s' * (wait.requeue_limit != 1)}" if wait.requeue_limit is not None
                   else "requeued for ever (the cluster's own Kueue, its settings unknown here)")
                + f", ~{kueue.SCALE_DOWN_S} s for GKE to remove a slice's idle nodes")
    lines = [f"Most a run of {cfg.num_slices} x {cfg.shape.pod_type} can be billed while it waits for slices that do "
             f"not all come ({settings}; ESTIMATE from list prices in {cfg.region}):"]
    for row in rows:
        mark = "  <- this stack" if row.capacity == cfg.capacity else ""
        lines.append(f"  {row.capacity:<12} {row.text}{mark}")
    info("\n".join(lines))
    return rows


@dataclass(frozen=True)
class WaitingCostRow:
    capacity: str
    cost: kueue.WaitingCost
    usd: Optional[float]
    """The bound in dollars (None: unbounded, Kueue requeues for ever)."""

    @property
    def text(self) -> str:
        if self.usd is None:
            return f"no bound: {self.cost.slices_billed} slice(s) x {self.cost.seconds_per_attempt} s per admission, " \
                   "requeued for ever"
        if not self.cost.slices_billed or self.usd == 0:
            return f"$0: {self.cost.why}"
        hours = self.cost.slice_hours or 0.0
        bound = "at most " if not CAPACITY[self.capacity].billed_at_list_price else ""
        return (f"{bound}${self.usd:,.2f}: {self.cost.attempts} admission(s) x {self.cost.slices_billed} slice(s) x "
                f"{self.cost.seconds_per_attempt / 60:.0f} min = {hours:.2f} slice-hours")


def waiting_cost_row(cfg: StackConfig, capacity: str, wait: kueue.WaitSettings, usd_per_chip_hour: float) -> WaitingCostRow:
    queued = cfg.queued_provisioning and capacity == "flex-start"
    cost = kueue.waiting_cost(capacity, cfg.num_slices, wait, queued_provisioning=queued)
    hours = cost.slice_hours
    usd = None if hours is None else hours * cfg.shape.chips * usd_per_chip_hour
    return WaitingCostRow(capacity, cost, usd)


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


def first_up(cfg: StackConfig, costs: list[CapacityCost], declared: list[PreflightReport]) -> str:
    """What the stack's first ``pulumi up`` starts and what that costs: its slices (held, or none until a run
    brings them) and each declared run, which KubeRay submits as soon as its cluster is up (``declared``: the
    runs' reports, from :func:`check_declared_runs`)."""
    slices = f"{cfg.num_slices} x {cfg.shape.pod_type} ({cfg.num_slices * cfg.shape.chips} chips, {cfg.capacity})"
    chosen = next((cost for cost in costs if cost.capacity == cfg.capacity), None)
    if cfg.scale_to_zero_or_default:
        idle = "" if chosen is None else f", ${chosen.idle_usd_per_hour:,.2f}/hour idle (ESTIMATE)"
        held = f"the GKE cluster{idle}, and no TPU slice: each run brings {slices} and releases them when it ends"
    else:
        idle = "" if chosen is None else f": ${chosen.idle_usd_per_hour:,.2f}/hour with the cluster (ESTIMATE)"
        held = f"the GKE cluster and its {slices} TPU slices, billed from then on whether a run trains or not{idle}"
    lines = [f"What the first `pulumi up` starts: {held}."]
    for run, report in zip(cfg.runs, declared):
        cost = report.cost
        spent = "" if cost is None else (
            f": {cost.steps} steps, about {cost.run_hours * 60:.0f} min of training, ${cost.run_usd:,.2f} of TPU time "
            "(ESTIMATE, compute only)"
        )
        lines.append(f"  run {run.run_name} (preset {run.preset}), which KubeRay submits as soon as its cluster is "
                     f"up{spent}")
    if cfg.runs:
        lines.append(f"  Remove a run from {config_key('runs')} before `pulumi up` to start it later, or never.")
    else:
        lines.append(f"  No run is declared ({config_key('runs')}): nothing trains until one is submitted.")
    return "\n".join(lines)
