"""Resolve MaxText ``ici_*`` / ``dcn_*`` parallelism keys into the axis sizes the estimates use.

MaxText's defaults, its -1 fill rule and the sharding check live in
``core/parallelism.py``; this module turns a checked config into the axis
sizes the HBM and cost estimates need (a MeshAxis of MaxText is DCN x ICI), and
rejects axes the memory model does not cover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.parallelism import AUTO, check_static, mesh_values

MODELLED_AXES = ("data", "fsdp", "fsdp_transpose", "tensor")
"""Axes the memory model covers; any other axis must stay 1."""


@dataclass(frozen=True)
class Mesh:
    """Resolved axis sizes; each product is DCN x ICI for that axis."""

    ici: Mapping[str, int]
    dcn: Mapping[str, int]

    def size(self, axis: str) -> int:
        return self.ici[axis] * self.dcn[axis]

    @property
    def data(self) -> int:
        return self.size("data")

    @property
    def fsdp(self) -> int:
        return self.size("fsdp") * self.size("fsdp_transpose")

    @property
    def tensor(self) -> int:
        return self.size("tensor")

    @property
    def param_shards(self) -> int:
        """Ways every weight (and its gradient and optimizer state) is split: fsdp x tensor.

        MaxText's logical rules shard ``embed`` over fsdp/fsdp_transpose and
        ``mlp`` / ``heads`` / ``kv_heads`` / ``vocab`` over tensor; ``data``
        replicates (``shard_optimizer_over_data: false``).
        """
        return self.fsdp * self.tensor

    @property
    def batch_shards(self) -> int:
        """Ways the batch dimension of activations is split (``activation_batch``: data, fsdp...)."""
        return self.data * self.fsdp

    @property
    def devices(self) -> int:
        return math.prod(self.ici.values()) * math.prod(self.dcn.values())

    def describe(self) -> str:
        parts = []
        for axis in MODELLED_AXES:
            i, d = self.ici[axis], self.dcn[axis]
            if i * d > 1:
                parts.append(f"{axis}={d}x{i}" if d > 1 else f"{axis}={i}")
        return " ".join(parts) or "single device"


def resolve_mesh(
    parallelism: Mapping[str, object], chips_per_slice: int, num_slices: int
) -> Mesh:
    """Apply MaxText's defaults and -1 fill rule to ``{ici,dcn}_*_parallelism`` keys.

    Keys that do not end in ``_parallelism`` are ignored, so a whole MaxText
    config dict can be passed. The sharding check itself is the trainer's
    (:func:`gke_ray_tpu.core.parallelism.check_static`), so the estimates and the job
    accept and reject exactly the same meshes.

    >>> m = resolve_mesh({"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}, 16, 2)
    >>> (m.data, m.fsdp, m.tensor)
    (2, 4, 4)
    """
    if not isinstance(num_slices, int) or isinstance(num_slices, bool) or num_slices < 1:
        raise ConfigError("num_slices", num_slices, "a positive integer")
    check_static(parallelism, chips_per_slice, num_slices)
    groups = {}
    for group, target in (("ici", chips_per_slice), ("dcn", num_slices)):
        values = mesh_values(parallelism, group)
        for key, value in values.items():
            axis = key.split("_", 1)[1].removesuffix("_parallelism")
            if axis not in MODELLED_AXES and value != 1:
                raise ConfigError(key, value, f"1: the HBM estimate models only {', '.join(MODELLED_AXES)}")
            if key == "dcn_tensor_parallelism" and value != 1:
                # base.yml: "never recommended"; XLA's peak with it was 0.72 and 1.46 times the estimate
                # (bench/bench_preflight_grid.py, Llama 3 8B and Qwen 3 0.6B): not a mesh the estimate knows.
                raise ConfigError(key, value, "1: the HBM estimate models tensor parallelism inside a slice, not across "
                                              "slices (MaxText's base.yml: never recommended)")
        sizes = {a: values[f"{group}_{a}_parallelism"] for a in MODELLED_AXES}
        fixed = math.prod(v for v in sizes.values() if v != AUTO)
        groups[group] = {a: target // fixed if v == AUTO else v for a, v in sizes.items()}
    return Mesh(ici=groups["ici"], dcn=groups["dcn"])
