"""MaxText's checkpoint manager on one directory, in a process of its own: ``python -m tests.orbax_probe <mode> <dir>``.

A process of its own because the Google clients read the emulator's environment when they are
imported (``tests/gcs_emulator.py``): the caller starts this with that environment from the first line.
It prints one JSON line.

``torn <dir>``: saves steps 0 and 4 with MaxText's own ``create_orbax_checkpoint_manager`` (Orbax's v1
training Checkpointer), then leaves what a save lost half-way leaves: a step 8 with some of step 4's
files and no commit marker (on a local path, the final name is what a torn GCS FUSE rename shows). Prints
the step a new manager would restore (``latest``), the steps it lists, and whether Orbax took the bucket
for a hierarchical-namespace one (its folder-based listing and deletion) or a flat one.

``time <dir> <MiB> ...``: saves and restores a state of each size (float32 arrays of 16 MiB at most, as
MaxText's sharded parameters), three times each, and prints the median seconds.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

COMMIT_MARKER = "commit_success.txt"


def manager(directory: str):
    from maxtext.common.checkpointing import create_orbax_checkpoint_manager

    return create_orbax_checkpoint_manager(directory, enable_checkpointing=True, use_async=False, save_interval_steps=1)


def state(mib: int, seed: int = 0) -> dict:
    import jax.numpy as jnp

    elements = 1 << 20 >> 2  # a MiB of float32
    return {f"w{i}": jnp.full((min(16, mib - 16 * i), elements), float(seed + i), jnp.float32)
            for i in range((mib + 15) // 16)}


def torn(directory: str) -> dict:
    import fsspec
    from orbax.checkpoint._src.path import gcs_utils

    from maxtext.common.checkpointing import latest_step

    saver = manager(directory)
    for step in (0, 4):
        saver.save_checkpointables(step, {"items": state(1, step)})
    saver.close()
    fs, root = fsspec.core.url_to_fs(directory)
    complete = sorted(path.removeprefix(f"{root}/4/") for path in fs.find(f"{root}/4"))
    # What a save lost half-way leaves: some of the step's files, no commit marker.
    copied = [name for name in complete if name != COMMIT_MARKER][: max(1, len(complete) // 2)]
    for name in copied:
        fs.makedirs(f"{root}/8/{name}".rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(f"{root}/8/{name}", fs.cat_file(f"{root}/4/{name}"))
    reader = manager(directory)
    return {"latest": latest_step(reader), "steps": [c.step for c in reader.checkpoints],
            "complete_files": complete, "torn_files": copied,
            # None for a bucket that does not say: Orbax branches on its truth.
            "hierarchical_namespace": bool(gcs_utils.is_hierarchical_namespace_enabled(directory))}


def timings(directory: str, sizes: list[int], repeats: int = 3) -> dict:
    import jax

    out = {}
    for mib in sizes:
        saves, restores = [], []
        for repeat in range(repeats):
            path = f"{directory.rstrip('/')}/{mib}mib-{repeat}"
            saver, tree = manager(path), state(mib)
            jax.block_until_ready(tree)
            start = time.perf_counter()
            saver.save_checkpointables(0, {"items": tree})
            saves.append(time.perf_counter() - start)
            saver.close()
            reader = manager(path)
            abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)
            start = time.perf_counter()
            jax.block_until_ready(reader.load_checkpointables(0, {"items": abstract}))
            restores.append(time.perf_counter() - start)
            reader.close()
        out[mib] = {"save_s": statistics.median(saves), "restore_s": statistics.median(restores)}
    return out


def main(argv: list[str]) -> int:
    mode, directory, *rest = argv
    result = torn(directory) if mode == "torn" else timings(directory, [int(x) for x in rest])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
