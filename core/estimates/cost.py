"""Cost of the TPU slices per hour and for a planned run (an ESTIMATE).

``cost per hour = chips per slice x slices x price per chip-hour`` (prices in
``core.estimates.prices``, with their source and date). The run cost is
``steps x estimated step time`` at that rate: compute time only - no
provisioning, image pull, XLA compilation, checkpoint writes or idle time,
and no GKE cluster fee, CPU head node, disks or networking.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ConfigError
from core.estimates.prices import DEFAULT_REGION, ChipPrice, chip_price
from core.tpu_catalogue import SliceShape


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
