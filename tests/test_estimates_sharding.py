"""The sharding check against the code that refuses a run: MaxText's own train state and rule tables, flax's
rule assignment and JAX's device mesh, each read from what is installed, not copied.

Each test compares ``gke_ray_tpu.core.sharding`` (no JAX, no MaxText import) with the installed platform
on the same input, so a change on either side (a new weight in a MaxText layer, a rule in its base.yml, a
new way JAX lays out a torus) fails here.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.models import modelled_models
from gke_ray_tpu.core.models import MODELLED_DECODER_BLOCKS, model_shape
from gke_ray_tpu.core.sharding import (
    _undersharded_refusal, check_sharding, logical_to_mesh, physical_mesh, run_mesh, unassignable_axis,
)
from gke_ray_tpu.core.job_spec import build_job
from gke_ray_tpu.core.maxtext import resolved_config
from gke_ray_tpu.core.presets import get_preset
from gke_ray_tpu.core.tpu_catalogue import GENERATIONS, slice_shape
from tests.conftest import REPO_ROOT

MESHES = {
    # The presets' mesh on the tutorial's slices, for every model the estimates model.
    "presets": ("compile_topology=v6e-16 compile_topology_num_slices=2",
                {"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}),
    # Every axis the rules name that a dense model's weights use, ICI and DCN, for one model of each layer kind.
    "every axis": ("compile_topology=v5p-16 compile_topology_num_slices=4",
                   {"ici_fsdp_parallelism": 2, "ici_tensor_parallelism": 2, "ici_context_parallelism": 2,
                    "dcn_autoregressive_parallelism": 2, "dcn_expert_parallelism": 2, "dcn_data_parallelism": 1}),
    "transposed": ("compile_topology=v5p-16 compile_topology_num_slices=2",
                   {"ici_fsdp_parallelism": 2, "ici_fsdp_transpose_parallelism": 2, "ici_tensor_parallelism": 2,
                    "dcn_tensor_sequence_parallelism": 2, "dcn_data_parallelism": 1}),
    # MaxText leaves the attention projections unsharded under it: too much of the model for the trainer.
    "context autoregressive": ("compile_topology=v5p-16 compile_topology_num_slices=2",
                               {"ici_fsdp_parallelism": 4, "ici_context_autoregressive_parallelism": 2}),
}
ONE_OF_EACH_KIND = ("llama3-8b", "gemma-7b", "gemma2-2b", "gemma3-4b", "gemma4-31b", "olmo3-7b", "gpt3-6b",
                    "qwen2.5-1.5b", "qwen3-0.6b", "mistral-7b")


def _settings(mesh: str) -> str:
    target, keys = MESHES[mesh]
    return " ".join([target, *(f"{k}={v}" for k, v in keys.items()),
                     "per_device_batch_size=1", "run_name=state", "base_output_directory=/tmp/state"])


@pytest.fixture(scope="module")
def maxtext_states() -> dict[str, dict[str, dict]]:
    """MaxText's states for every case of the test below, built in one process (one MaxText import): by mesh,
    then model."""
    argv = []
    for mesh, models in CASES:
        argv += ["--", _settings(mesh), *(models or modelled_models())]
    result = subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "maxtext_state.py"), *argv[1:]],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=True)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    by_settings = {_settings(mesh): mesh for mesh in MESHES}
    states: dict[str, dict[str, dict]] = {mesh: {} for mesh in MESHES}
    for line in lines:
        states[by_settings[line.pop("settings")]][line["model"]] = line
    return states


def _ours(model: str, keys: dict, mesh_sizes: dict) -> dict:
    config = {"model_name": model, **keys}
    rules = resolved_config(config)["logical_axis_rules"]
    found = {}
    for weight in model_shape(config).weights():
        spec = []
        for axes in logical_to_mesh(weight.axes, rules):
            kept = [axis for axis in axes if mesh_sizes.get(axis, 1) > 1]
            spec.append(None if not kept else kept[0] if len(kept) == 1 else kept)
        found[weight.name] = [list(weight.shape), spec]
    return found


CASES = [
    ("presets", None),
    ("every axis", ONE_OF_EACH_KIND),
    ("transposed", ONE_OF_EACH_KIND),
    ("context autoregressive", ("llama3-8b", "gemma2-2b", "gpt3-6b")),
]


@pytest.mark.parametrize("mesh, models", CASES)
def test_every_weight_is_the_one_maxtext_builds_and_shards(mesh, models, maxtext_states):
    """Path, shape and mesh axes of every weight, for every model the estimates model (the presets' mesh) and
    one model of each layer kind on meshes that use the other axes: as MaxText's AOT compile builds them."""
    models = models or modelled_models()
    if mesh != "context autoregressive":
        assert {model_shape({"model_name": m}).decoder_block for m in models} >= set(MODELLED_DECODER_BLOCKS) - {"default"}
    states = maxtext_states[mesh]
    target, keys = MESHES[mesh]
    shape = slice_shape("v6e", "4x4") if "v6e" in target else slice_shape("v5p", "2x2x2")
    slices = int(target.rsplit("=", 1)[1])
    compared = 0
    for model in models:
        state, config = states[model], {"model_name": model, **keys}
        if "error" in state:
            # MaxText refuses the run while it builds the state (Gemma 2B's one KV head on tensor 4): so does the check.
            with pytest.raises(ConfigError):
                check_sharding(config, shape, [slices])
            continue
        theirs = {name: [shape_, spec] for name, shape_, spec in state["weights"]}
        assert _ours(model, keys, state["mesh"]) == theirs, model
        # The trainer's own assertion on those weights, on the slices: refused here exactly where it refuses.
        resolved = resolved_config(config)
        ours = run_mesh(keys, resolved["mesh_axes"], shape.chips, slices)
        undersharded = _undersharded_refusal(model_shape(config), resolved["logical_axis_rules"], ours, resolved)
        assert (undersharded is None) == state["sufficiently_sharded"], (model, undersharded)
        # The mesh the check resolves is the one MaxText built (its axes of more than one device).
        assert {a: ours.size(a) for a in ours.axes if ours.size(a) > 1} == state["mesh"]
        compared += 1
    assert compared >= len(models) - 2
    refused = sum(not states[m].get("sufficiently_sharded", True) for m in models)
    assert refused == (len(models) if mesh == "context autoregressive" else 0)


def test_rules_are_merged_as_maxtext_merges_them():
    """llama2-7b.yml replaces base.yml's norm rule (norm -> fsdp) and keeps the rest: MaxText's state shows the
    norm scales on fsdp for Llama 2 and on tensor for Llama 3."""
    llama2 = resolved_config({"model_name": "llama2-7b"})["logical_axis_rules"]
    llama3 = resolved_config({"model_name": "llama3-8b"})["logical_axis_rules"]
    assert [rule for rule in llama2 if rule[0] == "norm"] == [["norm", "fsdp"]]
    assert [rule for rule in llama3 if rule[0] == "norm"] == [["norm", ["tensor"]]]
    assert len(llama2) == len(llama3)
    assert logical_to_mesh(("norm",), llama2) == [("fsdp",)]


def test_rule_assignment_is_flaxs():
    """Every weight's logical axes of every modelled model, under its own merged rules: flax's assignment."""
    from flax.linen import spmd

    seen = 0
    for name in modelled_models():
        rules = resolved_config({"model_name": name})["logical_axis_rules"]
        flax_rules = tuple((logical, tuple(mesh) if isinstance(mesh, list) else mesh) for logical, mesh in rules)
        for weight in model_shape({"model_name": name}).weights():
            theirs = spmd._logical_to_mesh_axes(weight.axes, flax_rules)
            theirs = [() if axes is None or axes is spmd._unassigned_axis else (axes,) if isinstance(axes, str)
                      else tuple(axes) for axes in theirs]
            assert logical_to_mesh(weight.axes, rules) == theirs, (name, weight.name)
            seen += 1
    assert seen > 900


DEVICE_KINDS = {"v4": "TPU v4", "v5e": "TPU v5 lite", "v5p": "TPU v5", "v6e": "TPU v6 lite", "tpu7x": "TPU7x"}


def _devices(shape):
    """Devices as JAX describes a slice's: kind, coordinates and core of each (what its mesh code reads)."""
    dims = [int(d) for d in shape.topology.split("x")] + [1] * (3 - shape.topology.count("x") - 1)
    cores = shape.generation.jax_devices_per_chip
    found = []
    for z, y, x, core in itertools.product(*(range(n) for n in (dims[2], dims[1], dims[0], cores))):
        found.append(SimpleNamespace(id=len(found), device_kind=DEVICE_KINDS[shape.generation.name], platform="tpu",
                                     coords=(x, y, z), core_on_chip=core, slice_index=0, process_index=0))
    return found


def _factorisations(total: int, parts: int):
    if parts == 1:
        yield (total,)
        return
    for first in (d for d in range(1, total + 1) if total % d == 0):
        for rest in _factorisations(total // first, parts - 1):
            yield (first, *rest)


@pytest.mark.parametrize("generation, topology", [
    ("v6e", "4x4"), ("v6e", "4x8"), ("v6e", "2x4"), ("v5e", "4x4"), ("v5e", "8x8"), ("v5p", "2x2x2"),
    ("v5p", "2x2x4"), ("v5p", "2x4x4"), ("v4", "2x2x2"), ("v4", "2x2x4"), ("tpu7x", "2x2x2"), ("tpu7x", "2x4x4"),
])
def test_device_mesh_refusals_are_jaxs(generation, topology):
    """Every split of a slice's devices over data, fsdp and tensor (and fsdp_transpose on 3-D tori): refused
    here exactly where JAX's create_device_mesh refuses it."""
    from jax._src import mesh_utils

    shape = slice_shape(generation, topology)
    devices = _devices(shape)
    axes = tuple(resolved_config({"model_name": "llama3-8b"})["mesh_axes"])
    used = ("data", "fsdp", "tensor") + (("fsdp_transpose",) if len(physical_mesh(shape)) >= 3 else ())
    refused = accepted = 0
    for split in _factorisations(len(devices), len(used)):
        sizes = dict(zip(used, split))
        ici = [sizes.get(axis, 1) for axis in axes]
        keys = {f"ici_{axis}_parallelism": size for axis, size in sizes.items()}
        mesh = run_mesh(keys, axes, len(devices), 1)
        try:
            mesh_utils.create_device_mesh(ici, devices)
            jax_refuses = False
        except NotImplementedError:
            jax_refuses = True
        assert (unassignable_axis(shape, mesh) is not None) == jax_refuses, (generation, topology, sizes)
        refused += jax_refuses
        accepted += not jax_refuses
    assert accepted and (refused or math.prod(physical_mesh(shape)) <= 8 or generation == "tpu7x")


def test_a_vocabulary_tensor_does_not_divide_is_refused_with_the_values_that_would_work():
    """The issue's example: OLMo 3 7B (a vocabulary of 100,278) on the llama3-8b preset's tensor 4, which XLA's
    compile refuses with IndivisibleError. On a v6e 4x4 only tensor 1 works: tensor 2 would leave fsdp 8,
    which JAX cannot lay on the 4x4 torus."""
    with pytest.raises(ConfigError) as error:
        build_job(get_preset("llama3-8b"), base_output_directory="/data/", run_name="o", slices=2,
                  overrides={"model_name": "olmo3-7b"}, generation="v6e", topology="4x4")
    assert (error.value.key, error.value.value) == ("ici_tensor_parallelism", 4)
    assert error.value.expected.startswith("one of [1], with ici_fsdp_parallelism taking the other chips")
    assert "vocab of 100,278 does not divide by tensor 4" in error.value.expected
    # On a v5p 2x2x2 slice (8 chips, any split) tensor 2 divides the vocabulary.
    check_sharding({"model_name": "olmo3-7b", "ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 2},
                   slice_shape("v5p", "2x2x2"), [2])


def test_an_ici_axis_the_torus_cannot_hold_is_refused():
    with pytest.raises(ConfigError) as error:
        check_sharding({"model_name": "llama3-8b", "ici_fsdp_parallelism": 8, "ici_tensor_parallelism": 2},
                       slice_shape("v6e", "4x4"), [2], "v6e-16 slice")
    assert (error.value.key, error.value.value) == ("ici_tensor_parallelism", 2)
    assert error.value.expected.startswith("one of [1, 4], with ici_fsdp_parallelism taking the other chips")
    assert "4x4x1 torus" in error.value.expected


def test_an_uneven_batch_names_the_batch_size():
    with pytest.raises(ConfigError) as error:
        check_sharding({"model_name": "llama3-8b", "ici_fsdp_parallelism": 16, "per_device_batch_size": 1.25},
                       slice_shape("v6e", "4x4"), [2])
    assert (error.value.key, error.value.value) == ("per_device_batch_size", 1.25)
    assert error.value.expected.startswith("a multiple of 1 ")
    for fits in (0.5, 2):  # below 1 MaxText loads a batch of one row per device and trains on part of it
        check_sharding({"model_name": "llama3-8b", "ici_fsdp_parallelism": 16, "per_device_batch_size": fits},
                       slice_shape("v6e", "4x4"), [2])


def test_every_slice_count_of_an_elastic_run_is_checked():
    """Tensor over DCN: 8 heads split over 2 slices x 4 chips, but an elastic run on 3 slices would split them 12 ways."""
    config = {"model_name": "llama3-8b", "ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4,
              "dcn_tensor_parallelism": -1, "dcn_data_parallelism": 1}
    check_sharding(config, slice_shape("v6e", "4x4"), [1, 2])
    with pytest.raises(ConfigError) as error:
        check_sharding(config, slice_shape("v6e", "4x4"), [1, 2, 3])
    assert error.value.key == "ici_tensor_parallelism" and "on 3 slice(s)" in error.value.expected


def test_tpu7x_counts_its_tensorcores_as_devices():
    """MaxText's tpu7x-16 is 8 chips of 2 TensorCores, 16 devices: ICI axes multiply to 16, not 8."""
    build_job(get_preset("llama3-8b"), base_output_directory="/data/", run_name="t", slices=2,
              overrides={"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}, generation="tpu7x", topology="2x2x2")
    with pytest.raises(ConfigError, match="16 chips"):
        build_job(get_preset("llama3-8b"), base_output_directory="/data/", run_name="t", slices=2,
                  overrides={"ici_fsdp_parallelism": 2, "ici_tensor_parallelism": 4}, generation="tpu7x",
                  topology="2x2x2")
    assert GENERATIONS["tpu7x"].jax_devices_per_chip == 2
