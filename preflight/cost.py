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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.capacity import CAPACITY_MODES
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
                f"  run (ESTIMATE): {self.steps} steps x {self.step_time_s:.3f} s (estimated) = "
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
