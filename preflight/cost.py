"""Cost of the TPU slices per hour and for a planned run (an ESTIMATE), and of the stack while idle.

``cost per hour = chips per slice x slices x price per chip-hour`` (prices in
``gke_ray_tpu.core.prices``, with their source and date). The run cost is
``steps x estimated step time`` at that rate: compute time only - no
provisioning, image pull, XLA compilation, checkpoint writes or idle time,
and no GKE cluster fee, CPU head node, disks or networking.

:func:`capacity_costs` prices the whole stack per capacity mode: while no run
trains (the slices it holds, the CPU pool, GKE's cluster fee) and while one
does. Flex-start has no grounded TPU price here, so it is priced at the
on-demand rate, an upper bound; a reservation is billed whether or not nodes
use it, so its slices count as idle cost even when the stack scales to zero.
:func:`waiting_costs` bounds what a queued run is billed while its slices do not all
come, and :func:`first_up` says what a stack's first ``pulumi up`` starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from gke_ray_tpu.core import kueue_waiting
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.capacity import CAPACITY, CAPACITY_MODES
from gke_ray_tpu.core.prices import (
    DEFAULT_REGION,
    GKE_CLUSTER_FEE_USD_PER_HOUR,
    HOURS_PER_MONTH,
    ChipPrice,
    chip_price,
)
from gke_ray_tpu.core.tpu_catalogue import SliceShape


@dataclass(frozen=True)
class CostEstimate:
    """TPU cost of ``num_slices`` slices; run figures are ESTIMATES (steps x estimated step time)."""

    pod_type: str
    num_slices: int
    chips: int
    spot: bool
    price: ChipPrice
    steps: int
    step_time_s: float
    step_basis: str = ""
    """What the step time rests on (``flops.StepTimeEstimate.basis``): a chip's measurements or an assumed MFU."""

    @property
    def usd_per_chip_hour(self) -> float:
        return self.price.usd_per_chip_hour(self.spot)

    @property
    def usd_per_hour(self) -> float:
        return self.chips * self.usd_per_chip_hour

    @property
    def run_hours(self) -> float:
        return self.steps * self.step_time_s / 3600

    @property
    def run_usd(self) -> float:
        return self.usd_per_hour * self.run_hours

    def format(self) -> str:
        kind = "Spot" if self.spot else "on-demand"
        return "\n".join(
            [
                f"TPU cost, {kind}, {self.price.region}: {self.num_slices} x {self.pod_type} = "
                f"{self.chips} chips x ${self.usd_per_chip_hour:.4f}/chip-hour = "
                f"${self.usd_per_hour:,.2f}/hour",
                f"  price source: {self.price.source} ({self.price.as_of})",
                f"  run (ESTIMATE): {self.steps} steps x {self.step_time_s:.3f} s (estimated"
                f"{': ' + self.step_basis if self.step_basis else ''}) = "
                f"{self.run_hours * 60:.1f} min -> ${self.run_usd:,.2f} "
                "(compute only; excludes start-up, compilation, checkpointing, GKE fees)",
            ]
        )


def cost_per_hour(
    shape: SliceShape,
    num_slices: int,
    spot: bool = False,
    region: str = DEFAULT_REGION,
    *,
    region_key: str = "region",
) -> float:
    """USD per hour for ``num_slices`` slices of ``shape``."""
    return estimate_cost(
        shape, num_slices, 0, 0.0, spot=spot, region=region, region_key=region_key
    ).usd_per_hour


def estimate_cost(
    shape: SliceShape,
    num_slices: int,
    steps: int,
    step_time: float,
    spot: bool = False,
    region: str = DEFAULT_REGION,
    *,
    region_key: str = "region",
) -> CostEstimate:
    """Cost per hour of the slices and of ``steps`` steps of ``step_time`` seconds (an estimate).

    ``step_time`` may be a number of seconds or anything with a ``seconds``
    attribute (a ``flops.StepTimeEstimate``).
    """
    if not isinstance(shape, SliceShape):
        raise ConfigError("topology", shape, "a SliceShape from tpu_catalogue.slice_shape()")
    if not isinstance(num_slices, int) or isinstance(num_slices, bool) or num_slices < 1:
        raise ConfigError("num_slices", num_slices, "a positive integer")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ConfigError("steps", steps, "a non-negative integer")
    seconds = getattr(step_time, "seconds", step_time)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise ConfigError("step_time", step_time, "seconds per step, >= 0")
    if not isinstance(spot, bool):
        raise ConfigError("spot", spot, "true or false")
    price = chip_price(shape.generation.name, region, region_key=region_key)
    return CostEstimate(
        pod_type=shape.pod_type,
        num_slices=num_slices,
        chips=shape.chips * num_slices,
        spot=spot,
        price=price,
        steps=steps,
        step_time_s=float(seconds),
        step_basis=getattr(step_time, "basis", ""),
    )


@dataclass(frozen=True)
class CapacityCost:
    """What a stack costs per hour under one capacity mode (an ESTIMATE from list prices)."""

    capacity: str
    tpu_usd_per_hour: float
    """All the stack's slices running."""
    slices_billed_idle: bool
    """The slices are billed while no run trains: held (no scale to zero) or reserved."""
    cpu_usd_per_hour: Optional[float]
    """The CPU nodes while a run trains (None: a machine type not in the price table)."""
    fee_usd_per_hour: float
    cpu_idle_usd_per_hour: Optional[float] = None
    """The CPU nodes while no run exists, where fewer than while one trains (None: the same)."""

    @property
    def idle_usd_per_hour(self) -> float:
        cpu = self.cpu_usd_per_hour if self.cpu_idle_usd_per_hour is None else self.cpu_idle_usd_per_hour
        return (self.tpu_usd_per_hour if self.slices_billed_idle else 0.0) + (cpu or 0.0) + self.fee_usd_per_hour

    @property
    def training_usd_per_hour(self) -> float:
        return self.tpu_usd_per_hour + (self.cpu_usd_per_hour or 0.0) + self.fee_usd_per_hour

    @property
    def idle_usd_per_month(self) -> float:
        return self.idle_usd_per_hour * HOURS_PER_MONTH


def capacity_costs(
    shape: SliceShape,
    num_slices: int,
    region: str,
    *,
    scale_to_zero: bool,
    cpu_usd_per_hour: Optional[float],
    cluster_fee: bool,
    modes: tuple[str, ...] = CAPACITY_MODES,
    region_key: str = "region",
    per_run_cpu_usd_per_hour: Optional[tuple[Optional[float], Optional[float]]] = None,
) -> list[CapacityCost]:
    """The stack under each mode of ``modes``; flex-start always scales to zero, a reservation is always billed.

    ``cpu_usd_per_hour``: the CPU nodes of a stack that holds its slices, idle or not. ``per_run_cpu_usd_per_hour``:
    (idle, training) of one that scales to zero, whose Ray head comes and goes with each run (default: as held).
    """
    price = chip_price(shape.generation.name, region, region_key=region_key)
    chips = shape.chips * num_slices
    fee = GKE_CLUSTER_FEE_USD_PER_HOUR if cluster_fee else 0.0
    per_run = per_run_cpu_usd_per_hour or (cpu_usd_per_hour, cpu_usd_per_hour)
    costs = []
    for mode in modes:
        scaled = mode == "flex-start" or scale_to_zero
        costs.append(CapacityCost(
            capacity=mode,
            tpu_usd_per_hour=chips * price.usd_per_chip_hour(mode == "spot"),
            slices_billed_idle=mode == "reservation" or not scaled,
            cpu_usd_per_hour=per_run[1] if scaled else cpu_usd_per_hour,
            fee_usd_per_hour=fee,
            cpu_idle_usd_per_hour=per_run[0] if scaled else None,
        ))
    return costs


def format_capacity_costs(costs: list[CapacityCost], chosen: str, what: str) -> str:
    """A table a reviewer reads: idle and training USD per hour, and a month left idle, per mode."""
    lines = [
        f"Stack cost per capacity mode ({what}; ESTIMATE from list prices):",
        f"  {'capacity':<13} {'TPU slices idle':<17} {'idle $/h':>9} {'training $/h':>13} {'idle month $':>13}",
    ]
    for cost in costs:
        idle_state = "billed (held)" if cost.slices_billed_idle else "none (scaled 0)"
        if cost.capacity == "reservation":
            idle_state = "billed (reserved)"
        mark = "*" if cost.capacity == chosen else " "
        lines.append(
            f"{mark} {cost.capacity:<13} {idle_state:<17} {cost.idle_usd_per_hour:>9,.2f} "
            f"{cost.training_usd_per_hour:>13,.2f} {cost.idle_usd_per_month:>13,.0f}"
        )
    lines.append("  * this stack. flex-start is priced at the on-demand rate (an upper bound: no grounded flex-start TPU "
                 "price); spot at today's Spot rate, which moves.")
    return "\n".join(lines)


def capacity_modes(shape: SliceShape) -> tuple[str, ...]:
    """The capacity modes a slice of ``shape`` can have (flex-start only on the generations that offer it)."""
    return tuple(mode for mode in CAPACITY_MODES if mode != "flex-start" or shape.generation.flex_start)


@dataclass(frozen=True)
class WaitingCostRow:
    capacity: str
    cost: kueue_waiting.WaitingCost
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


def waiting_costs(shape: SliceShape, num_slices: int, region: str, wait: kueue_waiting.WaitSettings, *,
                  queued_provisioning: bool, generation_key: str = "generation",
                  region_key: str = "region") -> list[WaitingCostRow]:
    """Per capacity mode, the most a run of ``num_slices`` slices can be billed while it waits in Kueue's queue for
    slices that do not all come (``core.kueue_waiting.waiting_cost``, at the chip's list price in ``region``; queued
    provisioning applies to flex-start). Raises ConfigError where the chip has no price there."""
    price = chip_price(shape.generation.name, region, generation_key=generation_key, region_key=region_key)
    rows = []
    for mode in capacity_modes(shape):
        cost = kueue_waiting.waiting_cost(mode, num_slices, wait, queued_provisioning=queued_provisioning and mode == "flex-start")
        hours = cost.slice_hours
        usd = None if hours is None else hours * shape.chips * price.usd_per_chip_hour(CAPACITY[mode].spot)
        rows.append(WaitingCostRow(mode, cost, usd))
    return rows


def format_waiting_costs(rows: Sequence[WaitingCostRow], chosen: str, shape: SliceShape, num_slices: int, region: str,
                         wait: kueue_waiting.WaitSettings) -> str:
    settings = (f"Kueue's {wait.timeout_s} s PodsReady timeout, "
                + (f"{wait.requeue_limit} requeue{'s' * (wait.requeue_limit != 1)}" if wait.requeue_limit is not None
                   else "requeued for ever (the cluster's own Kueue, its settings unknown here)")
                + f", ~{kueue_waiting.SCALE_DOWN_S} s for GKE to remove a slice's idle nodes")
    lines = [f"Most a run of {num_slices} x {shape.pod_type} can be billed while it waits for slices that do "
             f"not all come ({settings}; ESTIMATE from list prices in {region}):"]
    for row in rows:
        mark = "  <- this stack" if row.capacity == chosen else ""
        lines.append(f"  {row.capacity:<12} {row.text}{mark}")
    return "\n".join(lines)


def first_up(shape: SliceShape, num_slices: int, capacity: str, scale_to_zero: bool, costs: Sequence[CapacityCost],
             runs: Sequence[tuple[str, str, Optional[CostEstimate]]], runs_key: str) -> str:
    """What a stack's first ``pulumi up`` starts and what that costs: its slices (held, or none until a run brings
    them) and each declared run, ``(name, preset, its cost estimate)``, which KubeRay submits as soon as its cluster
    is up (``runs_key``: where runs are declared)."""
    slices = f"{num_slices} x {shape.pod_type} ({num_slices * shape.chips} chips, {capacity})"
    chosen = next((cost for cost in costs if cost.capacity == capacity), None)
    if scale_to_zero:
        idle = "" if chosen is None else f", ${chosen.idle_usd_per_hour:,.2f}/hour idle (ESTIMATE)"
        held = f"the GKE cluster{idle}, and no TPU slice: each run brings {slices} and releases them when it ends"
    else:
        idle = "" if chosen is None else f": ${chosen.idle_usd_per_hour:,.2f}/hour with the cluster (ESTIMATE)"
        held = f"the GKE cluster and its {slices} TPU slices, billed from then on whether a run trains or not{idle}"
    lines = [f"What the first `pulumi up` starts: {held}."]
    for name, preset, cost in runs:
        spent = "" if cost is None else (
            f": {cost.steps} steps, about {cost.run_hours * 60:.0f} min of training, ${cost.run_usd:,.2f} of TPU time "
            "(ESTIMATE, compute only)"
        )
        lines.append(f"  run {name} (preset {preset}), which KubeRay submits as soon as its cluster is up{spent}")
    if runs:
        lines.append(f"  Remove a run from {runs_key} before `pulumi up` to start it later, or never.")
    else:
        lines.append(f"  No run is declared ({runs_key}): nothing trains until one is submitted.")
    return "\n".join(lines)
