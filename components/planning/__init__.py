"""Pure planners: per-chip HBM, training FLOPs / estimated step time, and TPU cost.

No Pulumi and no JAX: these run anywhere, including inside ``pulumi preview``.

>>> from components.tpu_catalogue import slice_shape
>>> from components.planning import estimate_hbm
>>> b = estimate_hbm("llama3-8b", slice_shape("v6e", "4x4"), 2,
...                  {"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}, 4, 4096)
>>> b.fits
True

Modules: ``models`` (shapes as data), ``mesh`` (MaxText parallelism keys),
``memory`` (HBM breakdown), ``flops`` (FLOPs and estimated step time),
``prices`` (per chip-hour prices with source/date), ``cost``.
"""

from components.planning.cost import CostEstimate, cost_per_hour, estimate_cost
from components.planning.flops import (
    DEFAULT_MFU,
    StepFlops,
    StepTimeEstimate,
    estimate_step_time,
    training_tflops_per_device,
)
from components.planning.memory import (
    REMAT_POLICIES,
    USABLE_HBM_FRACTION,
    HbmBreakdown,
    estimate_hbm,
    estimate_hbm_from_config,
)
from components.planning.mesh import Mesh, resolve_mesh
from components.planning.models import MODELS, ModelShape, get_model
from components.planning.prices import PRICES, ChipPrice, chip_price

__all__ = [
    "DEFAULT_MFU",
    "MODELS",
    "PRICES",
    "REMAT_POLICIES",
    "USABLE_HBM_FRACTION",
    "ChipPrice",
    "CostEstimate",
    "HbmBreakdown",
    "Mesh",
    "ModelShape",
    "StepFlops",
    "StepTimeEstimate",
    "chip_price",
    "cost_per_hour",
    "estimate_cost",
    "estimate_hbm",
    "estimate_hbm_from_config",
    "estimate_step_time",
    "get_model",
    "resolve_mesh",
    "training_tflops_per_device",
]
