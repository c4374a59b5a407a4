"""Resolve MaxText ``ici_*`` / ``dcn_*`` parallelism keys into the axis sizes the planners use.

This mirrors MaxText's rule (``src/maxtext/configs/base.yml``, "Parallelism"
section): every axis defaults to 1 except ``dcn_data_parallelism: -1`` and
``ici_fsdp_parallelism: -1``; at most one axis per group may be -1 and is
filled so that the ICI product equals the chips of one slice and the DCN
product equals the number of slices. A MeshAxis of MaxText is DCN x ICI.

The authoritative sharding check for the trainer lives in
``training/parallelism.py``; this module only resolves the sizes the HBM and
cost planners need, and rejects axes the memory model does not cover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from components.errors import ConfigError

ALL_AXES = (
    "diloco",
    "data",
    "pipeline",
    "fsdp",
    "fsdp_transpose",
    "sequence",
    "context",
    "context_usp_ulysses",
    "context_autoregressive",
    "tensor",
    "tensor_sequence",
    "expert",
    "autoregressive",
)
"""Every ``{ici,dcn}_<axis>_parallelism`` key MaxText knows (base.yml)."""

MODELLED_AXES = ("data", "fsdp", "fsdp_transpose", "tensor")
"""Axes the memory model covers; any other axis must stay 1."""

MAXTEXT_DEFAULTS: dict[str, int] = {
    **{f"ici_{a}_parallelism": 1 for a in ALL_AXES},
    **{f"dcn_{a}_parallelism": 1 for a in ALL_AXES},
    "ici_fsdp_parallelism": -1,
    "dcn_data_parallelism": -1,
}


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


def _fill(group: str, values: dict[str, int], target: int, what: str) -> dict[str, int]:
    auto = [a for a, v in values.items() if v == -1]
    if len(auto) > 1:
        keys = ", ".join(f"{group}_{a}_parallelism" for a in auto)
        raise ConfigError(
            f"{group}_*_parallelism", keys, "at most one axis per group set to -1"
        )
    known = math.prod(v for v in values.values() if v != -1)
    if auto:
        if target % known:
            raise ConfigError(
                f"{group}_{auto[0]}_parallelism",
                -1,
                f"a fill value: the other {group} axes multiply to {known}, "
                f"which does not divide {target} ({what})",
            )
        values = {**values, auto[0]: target // known}
    product = math.prod(values.values())
    if product != target:
        shown = " x ".join(f"{a}={v}" for a, v in values.items() if v != 1) or "1"
        raise ConfigError(
            f"{group}_*_parallelism",
            shown,
            f"axes whose product is {target} ({what}); got {product}",
        )
    return values


def resolve_mesh(
    parallelism: Mapping[str, object], chips_per_slice: int, num_slices: int
) -> Mesh:
    """Apply MaxText's defaults and -1 fill rule to ``{ici,dcn}_*_parallelism`` keys.

    Keys that do not end in ``_parallelism`` are ignored, so a whole MaxText
    config dict can be passed.

    >>> m = resolve_mesh({"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}, 16, 2)
    >>> (m.data, m.fsdp, m.tensor)
    (2, 4, 4)
    """
    if not isinstance(num_slices, int) or isinstance(num_slices, bool) or num_slices < 1:
        raise ConfigError("num_slices", num_slices, "a positive integer")
    values = dict(MAXTEXT_DEFAULTS)
    for key, value in parallelism.items():
        if not key.endswith("_parallelism"):
            continue
        if key not in MAXTEXT_DEFAULTS:
            raise ConfigError(key, value, "a MaxText ici_*/dcn_*_parallelism key")
        if not isinstance(value, int) or isinstance(value, bool) or (value < 1 and value != -1):
            raise ConfigError(key, value, "a positive integer or -1 (fill)")
        values[key] = value
    for key, value in values.items():
        axis = key.split("_", 1)[1].removesuffix("_parallelism")
        if axis not in MODELLED_AXES and value != 1:
            raise ConfigError(
                key, value, f"1: the HBM planner models only {', '.join(MODELLED_AXES)}"
            )
    ici = {a: values[f"ici_{a}_parallelism"] for a in MODELLED_AXES}
    dcn = {a: values[f"dcn_{a}_parallelism"] for a in MODELLED_AXES}
    ici = _fill("ici", ici, chips_per_slice, "chips per slice")
    dcn = _fill("dcn", dcn, num_slices, "number of slices")
    return Mesh(ici=ici, dcn=dcn)
