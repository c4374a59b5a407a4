"""The stack's cold start at preview: what its TPU hosts pull and install before a run's first step, and its cost."""

from __future__ import annotations

from typing import Callable

from gke_ray_tpu.core import worker_env
from gke_ray_tpu.preflight.cold_start import format_cold_start, host_starts
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.prices import chip_price
from gke_ray_tpu.stack.config import StackConfig


def check_cold_start(cfg: StackConfig, info: Callable[[str], None]) -> None:
    shape = cfg.shape
    try:
        price = chip_price(shape.generation.name, cfg.region).usd_per_chip_hour(cfg.capacity == "spot")
    except ConfigError:
        price = None  # a generation or region without a grounded price: bytes and seconds only
    when = ("every run, on the new nodes of its slices" if cfg.scale_to_zero_or_default
            else "the pull once per node, the install at each Ray pod start on the held slices")
    info(format_cold_start(
        host_starts(worker_env.wheel_bytes(), len(worker_env.packages())),
        cfg.build_image, shape.hosts * cfg.num_slices, shape.chips * cfg.num_slices, price, when,
    ))
