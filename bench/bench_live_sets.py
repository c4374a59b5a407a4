"""What XLA holds at its peak, item by item, beside the estimate's items: the yardstick for the estimate's terms.

Each run is compiled by the compile check (or found in its cache) with no libtpu flags, as the other benches
compile it, and its live set at the peak (``gke_ray_tpu.preflight.xla_live_set``: the step with the most bytes in
use, each counted once) is sorted into what the estimate itemises, by the buffers' shapes and the ops that
made them:

- train state: XLA's parameters that are the train state's leaves (weights, ``mu``, ``nu``);
- weight copies: other buffers made from a train-state leaf (the bfloat16 copies of the weights), and, beside
  float32 gradients, bfloat16 buffers stacked as the layers are and none the sequence length (the same cast made
  by a fusion that carries no op name: Gemma 1 and 2, most Qwen compiles);
- saved layer inputs: the forward scan's outputs (``jvp()/while``; Gemma 4's, whose layers rematerialise
  themselves inside the scan, are not told apart from the rest);
- stacked gradients: other buffers in the gradients' dtype whose first dimension is a scanned block's layer
  count and none the sequence length (the layers' weight gradients as the backward loop accumulates them;
  Gemma 4's inner scan also stacks transposed weight copies);
- logits: ``[batch, length, vocabulary]`` buffers, the vocabulary whole or split over tensor, or ``[tokens,
  vocabulary]`` ones made by the forward's matmul or the backward's cast or division;
- the rest: the working set of whatever runs at that step.

``dump / XLA`` is the live set's bytes over the memory analysis' peak: the reader is right when it is 1.000.

    nice -n 5 .venv/bin/python bench/bench_live_sets.py [--group NAME ...] [--only NAME ...]

Groups: ``in-sample`` (the runs whose live sets the estimate's terms cite: ``bench_estimates.py``'s in-sample
and seen runs and ``bench_preflight_grid.py``'s in-sample ones), ``batch`` (``bench_xla_need.py``'s 8B from 2
to 10 sequences a chip), ``held-out-35d9fab``, ``held-out-12b0cde``, ``held-out-f764038``, ``held-out-7ca0599``,
``held-out-66d7acb``, ``held-out-35e2037`` and ``held-out`` (``bench_preflight_grid.py``'s rounds held out from the estimate of the commit each names, and from
the current one).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import bench_estimates  # noqa: E402
from bench_preflight_grid import (  # noqa: E402
    HELD_OUT, HELD_OUT_35E2037, HELD_OUT_66D7ACB, HELD_OUT_7CA0599, HELD_OUT_12B0CDE, HELD_OUT_35D9FAB, HELD_OUT_F764038, IN_SAMPLE, _job,
    print_table_head, run_groups,
)
from bench_xla_need import BATCH  # noqa: E402
from gke_ray_tpu.preflight.memory import estimate_hbm_from_config  # noqa: E402
from gke_ray_tpu.core.models import model_shape  # noqa: E402
from gke_ray_tpu.core.job_spec import JobSpec  # noqa: E402
from gke_ray_tpu.preflight.xla_check import compile_check, request_for_job  # noqa: E402

GIB = 2**30
ESTIMATES = {name: name for name in {**bench_estimates.CONFIGS, **bench_estimates.SEEN}}
GROUPS = {
    "in-sample": {**ESTIMATES, **IN_SAMPLE},
    "batch": {name: cell for name, cell in BATCH.items() if not name.endswith(("pdbs 11", "pdbs 12"))},  # no fit
    "held-out-35d9fab": HELD_OUT_35D9FAB,
    "held-out-12b0cde": HELD_OUT_12B0CDE,
    "held-out-f764038": HELD_OUT_F764038,
    "held-out-7ca0599": HELD_OUT_7CA0599,
    "held-out-66d7acb": HELD_OUT_66D7ACB,
    "held-out-35e2037": HELD_OUT_35E2037,
    "held-out": HELD_OUT,
}
ITEMS = ("train state", "weight copies", "saved layer inputs", "stacked gradients", "logits", "the rest")


def _spec(name: str, cell) -> JobSpec:
    return bench_estimates.job(cell) if isinstance(cell, str) else _job(name, cell)[0]


def _dims(shape: str) -> list[int]:
    return [int(d) for d in re.findall(r"\d+", shape.partition("[")[2])]


def _item(buffer: dict, layer_counts: set[int], vocabularies: set[int], gradient_dtype: str, length: int) -> str:
    op, shape, dims = buffer["op"], buffer["shape"], _dims(buffer["shape"])
    if op.startswith("state["):
        return "train state" if buffer["name"].startswith("param") else "weight copies"
    if op.endswith("jvp()/while"):
        return "saved layer inputs"
    if len(dims) == 3 and dims[2] in vocabularies or len(dims) == 2 and dims[1] in vocabularies and _logits_op(op):
        return "logits"
    if len(dims) >= 2 and dims[0] in layer_counts and length not in dims:
        if shape.startswith(gradient_dtype + "["):
            return "stacked gradients"
        if shape.startswith("bf16["):  # float32 gradients: a bfloat16 stack is the weights' cast, by a fusion
            return "weight copies"
    return "the rest"


def _logits_op(op: str) -> bool:
    """A [tokens, vocabulary] buffer (the batch and the length as one dimension) is logits when the forward's matmul
    made it, or the backward's op that writes their gradient (a cast, or a division where the head is soft-capped);
    the head weight's gradient, of the same shape where d_model is the length, is the backward's matmul."""
    forward = op.endswith("jvp()/dot_general") and "transpose(" not in op
    return forward or ("transpose(jvp())/" in op and not op.endswith("dot_general"))


def measure(name: str, cell, check=compile_check, recorded=None) -> dict:
    """One run's row: compiled by ``check`` (the compile check), its live set read from the compile's buffers, or,
    from ``recorded.py``, XLA's recorded answer and ``recorded(spec)``, the live set as :func:`live_set` read it."""
    spec = _spec(name, cell)
    estimate = estimate_hbm_from_config(spec.maxtext, spec.shape(), spec.slices)
    result = check(request_for_job(spec, libtpu_flags=()), progress=lambda _: None, timeout_s=3 * 3600)
    if result.fits is not True:  # no live set: XLA assigned no buffers
        return {"name": name, "refused": result.verdict()}
    per = estimate.devices_per_chip
    return {"name": name, "peak": result.peak_hbm_gib, **(recorded(spec) if recorded else live_set(spec, estimate, result)),
            "estimate": {"state": (estimate.params_gib + estimate.optimizer_gib) / per,
                         "gradients": estimate.gradients_gib / per, "saved": estimate.activations_gib / per,
                         "transient": estimate.transient_gib / per, "total": estimate.total_per_device_gib,
                         "kind": "head" if "head" in estimate.transient_kind else "layer"}}


def live_set(spec: JobSpec, estimate, result) -> dict:
    """The compile's live set at XLA's peak sorted into :data:`ITEMS` (GiB), its logits buffers (GiB each), and
    ``read``, the live set's bytes over the memory analysis' peak."""
    outcome = result.outcome
    model = model_shape(spec.maxtext)
    tensor = int(spec.maxtext.get("ici_tensor_parallelism", 1))
    layer_counts = {block.repeats for block in model.blocks}
    vocabularies = {model.vocab_size, model.vocab_size // tensor}
    gradient_dtype = "f32" if estimate.weight_dtype == "float32" else "bf16"
    length = int(spec.maxtext.get("max_target_length", 0))
    items = dict.fromkeys(ITEMS, 0)
    logits = []
    for buffer in outcome["peak_buffers"]:
        item = _item(buffer, layer_counts, vocabularies, gradient_dtype, length)
        items[item] += buffer["bytes"]
        if item == "logits":
            logits.append(buffer["bytes"])
    # Buffers under 1 MiB are not kept with the verdict: they are the rest too.
    items["the rest"] += outcome["live_set_bytes"] - sum(b["bytes"] for b in outcome["peak_buffers"])
    return {"read": outcome["live_set_bytes"] / outcome["peak_bytes"], "items": {k: v / GIB for k, v in items.items()},
            "logits": [b / GIB for b in logits]}


def report(group: str, rows: list[dict]) -> None:
    print_table_head(f"{group}: GiB per device at XLA's peak, and the estimate's items",
                     ["run (2 slices)", "XLA peak", "dump / XLA", *ITEMS, "estimate: state, gradients, saved, transient = total"])
    for row in rows:
        if "refused" in row:
            print(f"| {row['name']} | {row['refused']} | | | | | | | | |")
            continue
        items, est = row["items"], row["estimate"]
        logits = f"{len(row['logits'])} x {max(row['logits']):.2f}" if row["logits"] else "0"
        print(f"| {row['name']} | {row['peak']:.2f} | {row['read']:.3f} | {items['train state']:.2f} | "
              f"{items['weight copies']:.2f} | {items['saved layer inputs']:.2f} | {items['stacked gradients']:.2f} | "
              f"{logits} | {items['the rest']:.2f} | {est['state']:.2f}, {est['gradients']:.2f}, {est['saved']:.2f}, "
              f"{est['kind']} {est['transient']:.2f} = {est['total']:.2f} |")
    rows = [row for row in rows if "refused" not in row]
    with_gradients = sum(row["items"]["stacked gradients"] > 0 for row in rows)
    print(f"stacked gradients live at the peak: {with_gradients} of {len(rows)}; logits buffers: "
          + ", ".join(f"{n} in {sum(len(r['logits']) == n for r in rows)}" for n in sorted({len(r['logits']) for r in rows})))


if __name__ == "__main__":
    run_groups(GROUPS, measure, report, lambda row: row.get("refused") or f"{row['peak']:.2f} GiB")
