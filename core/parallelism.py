"""The sharding check: do MaxText's mesh keys fit the slices the job runs on?

MaxText builds a two-level device mesh. The ``ici_*_parallelism`` axes shard
within one slice (over ICI), so their product must equal the chips of a slice;
the ``dcn_*_parallelism`` axes span slices (over DCN), so their product must
equal the number of slices. One axis of each kind may be ``-1``, meaning "fill
in whatever makes the product right" (``max_utils.fill_unspecified_mesh_axes``).
MaxText only finds a mismatch after the job has reserved the slices, so the
submit command, ``pulumi preview`` and the trainer run these checks first.

Pure functions, no Ray or Pulumi import: the sharding rule (``gke_ray_tpu.core.sharding``), the estimates (``gke_ray_tpu.preflight``),
the stack's preflight and the trainer on the Ray workers share them.
"""

from __future__ import annotations

import math
from typing import Mapping

from gke_ray_tpu.core.errors import ConfigError

AUTO = -1
"""MaxText's "fill in this axis" value."""

# The mesh axes of MaxText 0.2.5 and their values in its configs/base.yml
# (tests/test_core_parallelism.py compares this with the installed file).
# Unset keys take these values, not 1: base.yml leaves ici_fsdp and dcn_data on
# auto, which is why the tutorial's 8B run on two slices needs no dcn_* key.
_AXES = (
    "diloco",
    "data",
    "fsdp",
    "fsdp_transpose",
    "sequence",
    "context",
    "context_usp_ulysses",
    "context_autoregressive",
    "tensor",
    "tensor_sequence",
    "autoregressive",
    "pipeline",
    "expert",
)
MAXTEXT_DEFAULTS: dict[str, int] = {
    **{f"ici_{axis}_parallelism": 1 for axis in _AXES},
    **{f"dcn_{axis}_parallelism": 1 for axis in _AXES},
    "ici_fsdp_parallelism": AUTO,
    "dcn_data_parallelism": AUTO,
}


def mesh_values(
    overrides: Mapping[str, object], kind: str, defaults: Mapping[str, int] = MAXTEXT_DEFAULTS
) -> dict[str, int]:
    """The effective ``<kind>_*_parallelism`` values: defaults, then the overrides.

    ``kind`` is ``"ici"`` or ``"dcn"``. Values must be positive integers or -1.
    """
    prefix = f"{kind}_"
    values = {k: int(v) for k, v in defaults.items() if k.startswith(prefix)}
    for key, raw in overrides.items():
        if not (key.startswith(prefix) and key.endswith("_parallelism")):
            continue
        if key not in values:
            raise ConfigError(key, raw, f"one of the MaxText mesh keys {', '.join(sorted(values))}")
        try:
            value = int(str(raw))
        except ValueError:
            raise ConfigError(key, raw, "an integer >= 1, or -1 to fill in") from None
        if value == 0 or value < AUTO:
            raise ConfigError(key, raw, "an integer >= 1, or -1 to fill in")
        values[key] = value
    return values


def check_axis_product(values: Mapping[str, int], target: int, what: str) -> None:
    """Raise ConfigError unless the axes multiply (or can be filled in) to ``target``.

    ``what`` names the target in the message, e.g. "the 16 chips of one v6e 4x4 slice".
    """
    kind = next(iter(values)).split("_", 1)[0]
    auto = sorted(k for k, v in values.items() if v == AUTO)
    fixed = dict(sorted((k, v) for k, v in values.items() if v not in (AUTO, 1)))
    product = math.prod(fixed.values())
    keys = "*".join(fixed) or f"{kind}_*_parallelism"
    shown = str(product) if len(fixed) < 2 else f"{'*'.join(map(str, fixed.values()))}={product}"
    if len(auto) > 1:
        raise ConfigError(",".join(auto), AUTO, f"at most one {kind}_*_parallelism axis set to -1")
    if auto and target % product:
        raise ConfigError(
            keys, shown, f"a divisor of {target}, {what}, so that {auto[0]}=-1 can fill in"
        )
    if not auto and product != target:
        raise ConfigError(keys, shown, f"a product of {target}, {what} (or one axis set to -1)")


def check_static(
    overrides: Mapping[str, object],
    chips_per_slice: int,
    num_slices: int,
    slice_name: str = "slice",
    defaults: Mapping[str, int] = MAXTEXT_DEFAULTS,
) -> None:
    """ICI product == chips per slice and DCN product == number of slices."""
    check_elastic(overrides, chips_per_slice, num_slices, num_slices, slice_name, defaults)


def check_elastic(
    overrides: Mapping[str, object],
    chips_per_slice: int,
    min_slices: int,
    max_slices: int,
    slice_name: str = "slice",
    defaults: Mapping[str, int] = MAXTEXT_DEFAULTS,
) -> None:
    """The static check for every slice count in ``[min_slices, max_slices]``.

    In practice the DCN axes must contain a -1 (MaxText re-derives the mesh on
    each restart) unless the range is a single value.
    """
    if min_slices < 1:
        raise ConfigError("min_slices", min_slices, "at least 1 slice")
    if min_slices > max_slices:
        raise ConfigError(
            "min_slices,max_slices", (min_slices, max_slices), "min_slices <= max_slices"
        )
    check_axis_product(
        mesh_values(overrides, "ici", defaults),
        chips_per_slice,
        f"the {chips_per_slice} chips of one {slice_name}",
    )
    dcn = mesh_values(overrides, "dcn", defaults)
    for slices in range(min_slices, max_slices + 1):
        what = (
            f"the number of slices ({slices})"
            if min_slices == max_slices
            else f"the number of slices when the elastic job runs on {slices} of "
            f"{min_slices}..{max_slices}"
        )
        check_axis_product(dcn, slices, what)
