"""Every sharding refusal MaxText, JAX or XLA makes before a step runs, made here first, with no JAX.

MaxText shards each weight (and the batch) by its logical axes: ``logical_axis_rules``
(``configs/base.yml``, merged with the model's and the run's own, read from the installed
MaxText at run time: :func:`gke_ray_tpu.core.maxtext.resolved_config`) map a logical axis such as
``vocab`` to mesh axes (``tensor``, ``tensor_sequence``, ``autoregressive``), and the run's
``ici_*``/``dcn_*_parallelism`` keys size those axes. Four things then refuse a run once its slices
are up (the compile check meets the first three in seconds, the pods only after the slices are paid for):

- JAX's device mesh (``jax._src.mesh_utils.create_device_mesh``, called by MaxText's
  ``create_device_mesh``) assigns each ICI axis to whole physical axes of the slice's torus, and refuses
  an axis no product of the free physical axes equals (``fsdp=8`` on a v6e 4x4: "Failed to find
  assignment for logical_axis_index ...");
- MaxText refuses a key/value projection whose KV heads its mesh axes do not divide
  (``Attention._validate_kv_head_sharding``);
- JAX refuses a train step whose weight, optimizer state or batch is sharded unevenly
  (``IndivisibleError``: OLMo 3's vocabulary of 100,278 over tensor 4, ``decoder/logits_dense/kernel``);
- the trainer refuses a model too much of which is left unsplit over a mesh axis
  (``assert_params_sufficiently_sharded``; the attention weights MaxText leaves unsharded under
  ``ici_context_autoregressive_parallelism``), which a compile does not check.

:func:`check_sharding` applies all four to every weight of the model (:meth:`ModelShape.weights`)
and to the batch, at each slice count the run may train on, and names the parallelism key to change
and the values of it that would pass. Flax's rule assignment (``flax.linen.spmd._logical_to_mesh_axes``:
rules in order, a rule applies when none of its mesh axes is taken by another dimension) and JAX's
torus assignment are re-implemented here; ``tests/test_estimates_sharding.py`` checks both against
the installed flax, JAX and MaxText.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.models import ModelShape, Weight, model_shape
from gke_ray_tpu.core.maxtext import resolved_config
from gke_ray_tpu.core.parallelism import AUTO, check_static, mesh_values
from gke_ray_tpu.core.tpu_catalogue import SliceShape

KEY_AXIS = {"pipeline": "stage"}
"""``<ici|dcn>_<name>_parallelism`` sizes mesh axis ``<name>``, but for these (MaxText's ``ici_map``)."""
BATCH_AXES = ("activation_embed_and_logits_batch", "activation_norm_length")
SHARDING_TARGETS = ("fsdp", "fsdp_transpose", "sequence", "context", "context_usp_ulysses", "context_autoregressive",
                    "tensor", "tensor_sequence", "stage", "expert")
"""The mesh axes MaxText's ``assert_params_sufficiently_sharded`` wants every weight split over, where they have more
than one device (``sharding._get_nontrival_mesh_axes``)."""
WEIGHT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""``input_data_sharding_logical_axes`` of base.yml: how the batch ``[global batch, length]`` is split."""


@dataclass(frozen=True)
class RunMesh:
    """The mesh one run builds at one slice count: each mesh axis's ICI and DCN size, in MaxText's axis order."""

    axes: tuple[str, ...]
    ici: Mapping[str, int]
    dcn: Mapping[str, int]
    num_slices: int

    def size(self, axis: str) -> int:
        return self.ici.get(axis, 1) * self.dcn.get(axis, 1)

    def shards(self, axes: Iterable[str]) -> int:
        return math.prod(self.size(axis) for axis in axes)


@dataclass(frozen=True)
class Refusal:
    """What refuses the run, and the parallelism key that would change it."""

    key: str
    value: object
    reason: str
    expected: str = ""
    """What the key should be, where no search of mesh values says it (the batch size)."""


def _key(group: str, axis: str) -> str:
    name = next((key for key, value in KEY_AXIS.items() if value == axis), axis)
    return f"{group}_{name}_parallelism"


def run_mesh(config: Mapping[str, object], mesh_axes: Sequence[str], devices_per_slice: int, num_slices: int) -> RunMesh:
    """MaxText's ICI and DCN axis sizes (its -1 filled in) for ``num_slices`` slices of ``devices_per_slice``."""
    sizes = {}
    for group, target in (("ici", devices_per_slice), ("dcn", num_slices)):
        values = mesh_values(config, group)
        wanted = {axis: values.get(_key(group, axis), 1) for axis in mesh_axes}
        fixed = math.prod(value for value in wanted.values() if value != AUTO)
        sizes[group] = {axis: (target // fixed if value == AUTO else value) for axis, value in wanted.items()}
    return RunMesh(tuple(mesh_axes), sizes["ici"], sizes["dcn"], num_slices)


def logical_to_mesh(names: Sequence[Optional[str]], rules: Sequence[Sequence]) -> list[tuple[str, ...]]:
    """Flax's assignment of mesh axes to an array's dimensions: rules in order; a rule applies to its logical
    axis when that dimension has none yet and none of the rule's mesh axes is used by another dimension."""
    result: list[Optional[tuple[str, ...]]] = [None] * len(names)
    for logical, mesh in rules:
        if logical not in names:
            continue
        axes = (mesh,) if isinstance(mesh, str) else tuple(mesh)
        taken = {axis for assigned in result if assigned for axis in assigned}
        position = list(names).index(logical)
        if result[position] is None and not taken & set(axes):
            result[position] = axes
    return [assigned or () for assigned in result]


# -- JAX's device mesh: each ICI axis on whole physical axes of the slice's torus --------------------------------


def physical_mesh(shape: SliceShape) -> tuple[int, ...]:
    """The torus JAX arranges one slice's devices in (``mesh_utils._get_physical_tpu_mesh``): x, y, z, and a
    core axis where a chip's TensorCores are separate devices (tpu7x)."""
    dims = [int(d) for d in shape.topology.split("x")]
    dims += [1] * (3 - len(dims))
    cores = shape.generation.jax_devices_per_chip
    return tuple(dims + [cores]) if cores > 1 else tuple(dims)


def _handled(shape: SliceShape, ici: Sequence[int]) -> bool:
    """The device kinds whose small slices JAX lays out by a fixed order, whatever the mesh's shape
    (``mesh_utils.device_kind_handler_dict``)."""
    devices = math.prod(physical_mesh(shape))
    generation, torus = shape.generation.name, physical_mesh(shape)
    if generation in ("v5e", "v6e"):
        return devices in (4, 8) or (devices == 16 and torus[:2] == (4, 4) and max(ici) == 16)
    if generation == "v5p":
        return torus == (2, 2, 2)
    if generation == "tpu7x":
        return devices % 8 == 0 and devices <= 32 and torus[0] <= 2 and torus[1] <= 2
    return False


def unassignable_axis(shape: SliceShape, mesh: RunMesh) -> Optional[str]:
    """The ICI axis JAX cannot place on whole physical axes of the torus (``_create_device_mesh_for_nd_torus``
    with MaxText's ``allow_split_physical_axes: false``), or None when every axis fits."""
    ici = [mesh.ici[axis] for axis in mesh.axes]
    if _handled(shape, ici):
        return None
    free = list(physical_mesh(shape))
    # tpu7x's core axis has the most bandwidth: JAX tries candidates holding it first.
    priority = {0: 1, 1: 2, 2: 3, 3: 0} if len(free) == 4 else None
    for index in reversed(range(len(ici))):
        size = ici[index]
        for count in range(len(free), 0, -1):
            candidates = list(itertools.combinations(enumerate(free), count))
            if priority:
                candidates.sort(key=lambda c: (min(priority[i] for i, _ in c), sum(priority[i] for i, _ in c)))
            found = next((c for c in candidates if math.prod(v for _, v in c) == size), None)
            if found:
                for i, _ in found:
                    free[i] = 0
                break
        else:
            if size > 1:
                return mesh.axes[index]
    return None


# -- the check ------------------------------------------------------------------------------------------------------


def _largest_axis(axes: Sequence[str], mesh: RunMesh) -> tuple[str, str]:
    """The (group, axis) among ``axes`` with the most shards: the key to change first."""
    group, axis = max(
        ((g, a) for a in axes for g in ("ici", "dcn") if getattr(mesh, g).get(a, 1) > 1),
        key=lambda ga: getattr(mesh, ga[0])[ga[1]],
    )
    return group, axis


def _uneven(dim: int, axes: Sequence[str], mesh: RunMesh, what: str) -> Optional[Refusal]:
    shards = mesh.shards(axes)
    if shards <= 1 or dim % shards == 0:
        return None
    group, axis = _largest_axis(axes, mesh)
    split = " x ".join(f"{a} {mesh.size(a)}" for a in axes if mesh.size(a) > 1)
    return Refusal(_key(group, axis), getattr(mesh, group)[axis], f"{what} of {dim:,} does not divide by {split}")


def _weight_refusal(weight: Weight, rules: Sequence, mesh: RunMesh) -> Optional[Refusal]:
    for dim, name, axes in zip(weight.shape, weight.axes, logical_to_mesh(weight.axes, rules)):
        found = _uneven(dim, axes, mesh, f"{weight.name}'s {name}")
        if found:
            return Refusal(found.key, found.value, found.reason + " (JAX's IndivisibleError in the train step)")
    return None


def _kv_head_refusal(model: ModelShape, rules: Sequence, mesh: RunMesh, resolved: Mapping) -> Optional[Refusal]:
    """MaxText's own check (``Attention._validate_kv_head_sharding``), before JAX's: the key projection's
    ``kv_heads`` axes, and the context axis under Ulysses context parallelism, must divide the KV heads."""
    ulysses = str(resolved.get("context_parallel_strategy", "")).lower() == "ulysses"
    for weight in model.weights():
        if "kv_heads" not in weight.axes or not weight.name.endswith("key/kernel"):
            continue
        position = weight.axes.index("kv_heads")
        axes = list(logical_to_mesh(weight.axes, rules)[position])
        if ulysses and resolved.get("context_sharding", "context") not in axes:
            axes.append(str(resolved.get("context_sharding", "context")))
        found = _uneven(weight.shape[position], axes, mesh, f"{weight.name.rsplit('/', 2)[0]}'s KV heads")
        if found:
            return Refusal(found.key, found.value, found.reason + " (MaxText splits no attention head)")
    return None


def _batch_refusal(resolved: Mapping, rules: Sequence, mesh: RunMesh, devices: int) -> Optional[Refusal]:
    """The batch MaxText loads, ``[global batch, length]`` (``get_shaped_batch``), split by ``BATCH_AXES``; an
    uneven global batch is the batch size's to change (every split of the chips gives the same shard count)."""
    per_device = float(resolved["per_device_batch_size"])
    batch = devices if per_device < 1 else int(devices * per_device)
    names = tuple(resolved.get("input_data_sharding_logical_axes") or BATCH_AXES)
    batch_axes, length_axes = logical_to_mesh(names, rules)
    shards = mesh.shards(batch_axes)
    if batch % shards:
        step = shards / math.gcd(shards, devices) / (devices / math.gcd(shards, devices))
        split = " x ".join(f"{a} {mesh.size(a)}" for a in batch_axes if mesh.size(a) > 1)
        return Refusal("per_device_batch_size", resolved["per_device_batch_size"],
                       f"the global batch of {batch:,} (per_device_batch_size x {devices} devices) does not divide by "
                       f"its {shards} shards ({split}; JAX's IndivisibleError on the batch)", f"a multiple of {step:g}")
    found = _uneven(int(resolved["max_target_length"]), length_axes, mesh, "max_target_length")
    return Refusal(found.key, found.value, found.reason + " (JAX's IndivisibleError on the batch)") if found else None


def _undersharded_refusal(model: ModelShape, rules: Sequence, mesh: RunMesh, resolved: Mapping) -> Optional[Refusal]:
    """MaxText's ``assert_params_sufficiently_sharded``, which the trainer runs on the slices (``train_utils``) and
    an AOT compile does not: the weights not split over every target axis of more than one device may be at most
    ``sharding_tolerance`` of the model. As MaxText counts it: their elements over all weights' bytes."""
    if resolved.get("use_multimodal"):
        return None
    targets = {axis for axis in SHARDING_TARGETS if axis in mesh.axes and mesh.size(axis) > 1}
    if not targets:
        return None
    missed: dict[str, int] = {}
    unsharded = total = 0
    for weight in model.weights():
        used = {axis for dim in logical_to_mesh(weight.axes, rules) for axis in dim}
        total += weight.size * WEIGHT_BYTES.get(str(resolved.get("weight_dtype")), 4)
        if not targets <= used:
            unsharded += weight.size
            for axis in targets - used:
                missed[axis] = missed.get(axis, 0) + weight.size
    tolerance = float(resolved.get("sharding_tolerance", 0.02))
    if unsharded <= tolerance * total:
        return None
    axis = max(missed, key=missed.__getitem__)
    group = "ici" if mesh.ici.get(axis, 1) > 1 else "dcn"
    return Refusal(_key(group, axis), getattr(mesh, group)[axis],
                   f"weights not split over {axis} are {unsharded / total:.1%} of the model as MaxText counts them, over "
                   f"its sharding_tolerance of {tolerance:.0%} (assert_params_sufficiently_sharded, on the slices)")


def refusal(
    model: ModelShape, resolved: Mapping, config: Mapping[str, object], shape: SliceShape, num_slices: int
) -> Optional[Refusal]:
    """The first thing that refuses the run at ``num_slices`` slices, or None."""
    devices_per_slice = shape.chips * shape.generation.jax_devices_per_chip
    mesh = run_mesh(config, resolved["mesh_axes"], devices_per_slice, num_slices)
    axis = unassignable_axis(shape, mesh)
    if axis is not None:
        torus = "x".join(str(d) for d in physical_mesh(shape))
        return Refusal(_key("ici", axis), mesh.ici[axis],
                       f"JAX places each ICI axis on whole axes of the {shape.pod_type} slice's {torus} torus, and "
                       f"{axis} {mesh.ici[axis]} is no product of the ones left over")
    rules = resolved["logical_axis_rules"]
    found = _kv_head_refusal(model, rules, mesh, resolved)
    for weight in model.weights():
        found = found or _weight_refusal(weight, rules, mesh)
    found = found or _batch_refusal(resolved, rules, mesh, devices_per_slice * num_slices)
    return found or _undersharded_refusal(model, rules, mesh, resolved)


def _fill_key(key: str) -> str:
    """Where the chips a changed key frees go: fsdp inside a slice, data across slices (MaxText's -1 defaults)."""
    group = key.split("_", 1)[0]
    default = "fsdp" if group == "ici" else "data"
    other = "data" if group == "ici" else "fsdp"
    return f"{group}_{other if key == f'{group}_{default}_parallelism' else default}_parallelism"


def _passes(config: Mapping, shape: SliceShape, counts: Sequence[int]) -> bool:
    devices_per_slice = shape.chips * shape.generation.jax_devices_per_chip
    try:
        # The model too: a mesh key can change how MaxText builds it (context-autoregressive attention).
        model, resolved = model_shape(config), resolved_config(config)
        for n in counts:
            check_static(config, devices_per_slice, n)
            if refusal(model, resolved, config, shape, n) is not None:
                return False
    except ConfigError:
        return False
    return True


def working_values(
    found: Refusal, model: ModelShape, resolved: Mapping, config: Mapping[str, object], shape: SliceShape,
    counts: Sequence[int],
) -> list[int]:
    """Values of the refused key with which the run passes at every count, the freed chips going to
    :func:`_fill_key` (set to -1; a -1 elsewhere in the group becomes the size it had)."""
    group, fill = found.key.split("_", 1)[0], _fill_key(found.key)
    devices_per_slice = shape.chips * shape.generation.jax_devices_per_chip
    target = devices_per_slice if group == "ici" else max(counts)
    had = getattr(run_mesh(config, resolved["mesh_axes"], devices_per_slice, max(counts)), group)
    fixed = {
        key: had[axis] for axis in had for key in [_key(group, axis)]
        if mesh_values(config, group).get(key) == AUTO and key != fill
    }
    working = []
    for value in (v for v in range(1, target + 1) if target % v == 0 and v != found.value):
        trial = {**config, **fixed, found.key: value, fill: AUTO}
        if _passes(trial, shape, counts):
            working.append(value)
    return working


def check_sharding(
    config: Mapping[str, object], shape: SliceShape, slice_counts: Iterable[int], slice_name: str = "slice"
) -> None:
    """Raise ConfigError for the first sharding MaxText, JAX or XLA would refuse at any of ``slice_counts``,
    naming the parallelism key and the values of it that would pass.

    Checked only where the shape is known (MaxText installed, a model :func:`model_shape` models) and the
    mesh is MaxText's default one (no ``custom_mesh_and_rule``, no pipeline stages); otherwise MaxText's
    own checks decide on the slices (or the compile check before them). The ICI and DCN products
    themselves are :func:`gke_ray_tpu.core.parallelism.check_elastic`'s.
    """
    try:
        model = model_shape(config)
    except ConfigError:
        return
    resolved = resolved_config(config)
    if resolved is None or resolved.get("custom_mesh_and_rule") or resolved.get("using_pipeline_parallelism"):
        return
    if any(int(v) != 1 for k, v in config.items() if k.endswith("pipeline_parallelism")):
        return
    counts = sorted(set(slice_counts))
    for num_slices in counts:
        found = refusal(model, resolved, config, shape, num_slices)
        if found is None:
            continue
        if found.expected:
            raise ConfigError(found.key, found.value,
                              f"{found.expected} ({model.name} on {num_slices} {slice_name}(s): {found.reason})")
        working = working_values(found, model, resolved, config, shape, counts)
        fill = _fill_key(found.key)
        way = (f"one of {working}, with {fill} taking the other chips" if working
               else f"another mesh: no value of {found.key} alone passes with the other keys as they are")
        raise ConfigError(
            found.key, found.value,
            f"{way} ({model.name} on {num_slices} {slice_name}(s): {found.reason})",
        )
