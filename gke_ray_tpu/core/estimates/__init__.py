"""Estimates: per-chip HBM, training FLOPs / estimated step time, and TPU cost.

No Pulumi and no JAX: these run anywhere, including inside ``pulumi preview``.

>>> from gke_ray_tpu.core.tpu_catalogue import slice_shape
>>> from gke_ray_tpu.core.estimates import estimate_hbm
>>> b = estimate_hbm("llama3-8b", slice_shape("v6e", "4x4"), 2,
...                  {"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}, 4, 4096)
>>> b.fits
True

Modules: ``models`` (shapes from the installed MaxText's model configs), ``mesh`` (MaxText parallelism keys),
``memory`` (HBM breakdown), ``flops`` (FLOPs and estimated step time),
``prices`` (per chip-hour prices with source/date), ``cost``.
"""

from gke_ray_tpu.core.estimates.cost import CostEstimate, cost_per_hour, estimate_cost
from gke_ray_tpu.core.estimates.flops import (
    DEFAULT_MFU,
    StepFlops,
    StepTimeEstimate,
    estimate_step_time,
    training_tflops_per_device,
)
from gke_ray_tpu.core.estimates.memory import (
    ESTIMATE_OVER_XLA,
    MODELLED_REMAT_POLICIES,
    HbmBreakdown,
    estimate_hbm,
    estimate_hbm_from_config,
)
from gke_ray_tpu.core.estimates.mesh import Mesh, resolve_mesh
from gke_ray_tpu.core.estimates.models import COMPILE_CHECK, NoEstimate, ModelShape, get_model, model_shape, modelled_models
from gke_ray_tpu.core.estimates.prices import PRICES, ChipPrice, chip_price

__all__ = [
    "DEFAULT_MFU",
    "COMPILE_CHECK",
    "PRICES",
    "ESTIMATE_OVER_XLA",
    "MODELLED_REMAT_POLICIES",
    "ChipPrice",
    "CostEstimate",
    "HbmBreakdown",
    "Mesh",
    "ModelShape",
    "NoEstimate",
    "StepFlops",
    "StepTimeEstimate",
    "chip_price",
    "cost_per_hour",
    "estimate_cost",
    "estimate_hbm",
    "estimate_hbm_from_config",
    "estimate_step_time",
    "get_model",
    "model_shape",
    "modelled_models",
    "resolve_mesh",
    "training_tflops_per_device",
]
