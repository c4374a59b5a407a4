"""Pure planners: per-chip HBM estimate.

No Pulumi and no JAX: these run anywhere, including inside ``pulumi preview``.

>>> from components.tpu_catalogue import slice_shape
>>> from components.planning import estimate_hbm
>>> b = estimate_hbm("llama3-8b", slice_shape("v6e", "4x4"), 2,
...                  {"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}, 4, 4096)
>>> b.fits
True

Modules: ``models`` (shapes as data), ``mesh`` (MaxText parallelism keys),
``memory`` (HBM breakdown).
"""

from components.planning.memory import (
    REMAT_POLICIES,
    USABLE_HBM_FRACTION,
    HbmBreakdown,
    estimate_hbm,
    estimate_hbm_from_config,
)
from components.planning.mesh import Mesh, resolve_mesh
from components.planning.models import MODELS, ModelShape, get_model

__all__ = [
    "MODELS",
    "REMAT_POLICIES",
    "USABLE_HBM_FRACTION",
    "HbmBreakdown",
    "Mesh",
    "ModelShape",
    "estimate_hbm",
    "estimate_hbm_from_config",
    "get_model",
    "resolve_mesh",
]
