"""MaxText's own abstract train state, one JSON line per model: every weight's path, shape and partitioning.

``python tests/maxtext_state.py '<key=value ...>' MODEL ... [-- '<key=value ...>' MODEL ...]`` builds, for each
model under each group's keys (one process, one MaxText import for them all), the train state
MaxText's AOT compile builds (``train_compile.get_topology_mesh`` and ``get_shaped_inputs``: shapes
only, nothing compiled or allocated) for the TPU topology the keys name, and prints
``{"settings", "model", "mesh", "weights": [[path, shape, spec], ...], "sufficiently_sharded"}`` with each spec as MaxText
shards the weight (its size-one mesh axes dropped) and whether the trainer's
``assert_params_sufficiently_sharded`` takes the weights, or ``{"settings", "model", "error"}`` where MaxText refuses
the run.
``tests/test_estimates_sharding.py`` compares it with ``gke_ray_tpu.core.sharding``.
"""

from __future__ import annotations

import json
import os
import sys

for name, value in {"JAX_PLATFORMS": "cpu", "TPU_WORKER_HOSTNAMES": "localhost", "ALLOW_MULTIPLE_LIBTPU_LOAD": "true",
                    "TF_CPP_MIN_LOG_LEVEL": "3"}.items():
    os.environ.setdefault(name, value)


def _path(keys) -> str:
    """``['model']['decoder']['layers']['mlp']['wo']['kernel'].value`` -> ``decoder/layers/mlp/wo/kernel``."""
    # Dict keys name the modules (a "value" projection among them); the trailing attribute is the variable's .value.
    parts = [str(key.key) for key in keys if hasattr(key, "key")]
    return "/".join(parts[1:])


def main(settings: str, models: list[str]) -> None:
    """One group: ``models`` under the keys ``settings``."""
    import jax
    from flax import nnx
    from maxtext.configs import pyconfig
    from maxtext.trainers.pre_train import train_compile
    from maxtext.utils import sharding

    for model in models:
        try:
            config = pyconfig.initialize(["state", "src/maxtext/configs/base.yml", f"model_name={model}", *settings.split()])
            mesh = train_compile.get_topology_mesh(config)
            (state, _), _, shardings, _, _ = train_compile.get_shaped_inputs(mesh, config)
        except Exception as error:  # noqa: BLE001 - MaxText refuses with anything
            print(json.dumps({"settings": settings, "model": model, "error": f"{type(error).__name__}: {error}"[:500]}),
                  flush=True)
            continue
        weights = []
        leaves = jax.tree_util.tree_leaves_with_path(state)
        for (keys, leaf), (_, placed) in zip(leaves, jax.tree_util.tree_leaves_with_path(shardings)):
            if not keys or getattr(keys[0], "key", None) != "model" or any("rngs" == getattr(k, "key", None) for k in keys):
                continue
            spec = sharding.remove_size_one_mesh_axis(placed.spec, mesh)
            spec = [list(axes) if isinstance(axes, tuple) else axes for axes in spec]
            spec += [None] * (len(leaf.shape) - len(spec))
            weights.append([_path(keys), list(leaf.shape), spec])
        mesh_sizes = {axis: size for axis, size in mesh.shape.items() if size > 1}
        try:  # as train_utils.setup_train_loop asks it of the model's parameters, on the slices
            sharding.assert_params_sufficiently_sharded(state["model"].filter(nnx.Param), mesh, config.sharding_tolerance)
            sufficient = True
        except AssertionError:
            sufficient = False
        print(json.dumps({"settings": settings, "model": model, "mesh": mesh_sizes, "weights": weights,
                          "sufficiently_sharded": sufficient}), flush=True)


if __name__ == "__main__":
    groups, group = [], []
    for arg in [*sys.argv[1:], "--"]:
        if arg == "--":
            groups.append(group)
            group = []
        else:
            group.append(arg)
    for settings, *models in groups:
        main(settings, models)
