"""XLA's peak as its scheduler finds HBM free, against the least it can schedule the step in, beside the estimate.

XLA's TPU scheduler overlaps communication with compute while the step's memory stays under a share of HBM,
and gives the overlap up once it would go over: libtpu's ``--xla_tpu_scheduler_percent_shared_memory_limit``
(its SparseCore twin's help text: "Percent of memory usage to total memory at which the memory pressure
reduction heuristic will trigger"). So a run far below the limit peaks higher than the program needs, and a
run near it is squeezed towards what it needs. Each run here is compiled twice by the compile check's child:
as the grid bench compiles it (no flags: the scheduler's own share; the pods' flags leave the peak alone,
``bench_compile_flags.py``), and with the heuristic on from the first byte (the flag at 1%: the least memory
the scheduler finds). The first is XLA's verdict; the second shows how much of its peak was its choice.

    nice -n 5 .venv/bin/python bench/bench_xla_need.py [--group NAME ...] [--only NAME ...]

Groups: ``batch`` (the tutorial's Llama 3 8B on 2 x v6e-16 from 2 to 12 sequences a chip, through XLA's
limit), ``refused-by-estimate`` (runs the estimate refused with its earlier band and XLA fits),
``fits-by-estimate`` (the other edge: a run the estimate calls "fits" near the limit) and ``held-out-35d9fab``
(``bench_preflight_grid.py``'s round held out from 35d9fab's estimate). Results land in the compile check's
cache; a second run prints at once.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_preflight_grid import HELD_OUT_35D9FAB, PRESET, WITHIN, Cell, _job, print_table_head, run_groups  # noqa: E402
from gke_ray_tpu.preflight.memory import estimate_hbm_from_config  # noqa: E402
from gke_ray_tpu.core.job_spec import JobSpec  # noqa: E402
from gke_ray_tpu.preflight.xla_check import compile_check, request_for_job  # noqa: E402

LEAST_MEMORY = ("--xla_tpu_scheduler_percent_shared_memory_limit=1",)
"""The scheduler's memory-pressure heuristic on from the first byte."""

BATCH: dict[str, Cell] = {
    f"llama3-8b/v6e pdbs {pdbs}": ("v6e", "4x4", {**PRESET, "per_device_batch_size": pdbs}, 2)
    for pdbs in (2, 4, 8, 10, 11, 12)
}
REFUSED_BY_ESTIMATE: dict[str, Cell] = {
    # Runs the estimate, with the band of 070808b (0.68-1.40), called "does NOT fit" and XLA fits.
    "qwen3-1.7b/v6e fsdp 16 pdbs 16": ("v6e", "4x4", {"model_name": "qwen3-1.7b", "ici_fsdp_parallelism": 16,
                                                      "ici_tensor_parallelism": 1, "per_device_batch_size": 16}, 2),
    "gemma2-2b/v6e pdbs 10": ("v6e", "4x4", {**PRESET, "model_name": "gemma2-2b", "per_device_batch_size": 10}, 2),
}
FITS_BY_ESTIMATE: dict[str, Cell] = {
    # The run the estimate calls "fits" nearest the limit for the model it understates most (Gemma 3 4B on v5e:
    # 0.687 in the held-out-35d9fab round); one more sequence a chip is "uncertain".
    "gemma3-4b/v5e pdbs 4 seq 2048": ("v5e", "4x4", {**PRESET, "model_name": "gemma3-4b", "per_device_batch_size": 4,
                                                     "max_target_length": 2048}, 2),
}
GROUPS = {"batch": BATCH, "refused-by-estimate": REFUSED_BY_ESTIMATE, "fits-by-estimate": FITS_BY_ESTIMATE,
          "held-out-35d9fab": HELD_OUT_35D9FAB}


def _xla(name: str, spec: JobSpec, flags: tuple[str, ...], check) -> tuple[float, str, float]:
    result = check(request_for_job(spec, libtpu_flags=flags), progress=lambda _: None, timeout_s=3 * 3600)
    if result.fits is None:
        raise SystemExit(f"{name}: XLA refused the run: {result.message.strip()[:200]}")
    return result.peak_hbm_gib, "peak" if result.fits else "needs", result.wall_seconds


def measure(name: str, cell: Cell, check=compile_check) -> dict:
    """One run's row: compiled twice by ``check`` (the compile check; ``recorded.py`` passes XLA's recorded
    answers)."""
    spec, _ = _job(name, cell)
    estimate = estimate_hbm_from_config(spec.maxtext, spec.shape(), spec.slices)
    default, default_kind, default_s = _xla(name, spec, (), check)
    need, need_kind, need_s = _xla(name, spec, LEAST_MEMORY, check)
    return {"name": name, "estimate": estimate.total_per_device_gib, "verdict": estimate.verdict,
            "limit": estimate.usable_gib / estimate.devices_per_chip, "default": default,
            "default_kind": default_kind, "need": need, "need_kind": need_kind, "seconds": (default_s, need_s)}


def report(group: str, rows: list[dict]) -> None:
    print_table_head(group, ["run (2 slices)", "estimate", "its verdict", "limit", "XLA, own scheduler",
                             "XLA, least memory", "own / least", "estimate / own", "estimate / least", "compile s"])
    for row in rows:
        print(f"| {row['name']} | {row['estimate']:.2f} | {row['verdict']} | {row['limit']:.2f} "
              f"| {row['default']:.2f} {row['default_kind']} | {row['need']:.2f} {row['need_kind']} "
              f"| {row['default'] / row['need']:.3f} | {row['estimate'] / row['default']:.3f} "
              f"| {row['estimate'] / row['need']:.3f} | {row['seconds'][0]:.0f}, {row['seconds'][1]:.0f} |")
    slack = [row["default"] / row["need"] for row in rows]
    own = [row["estimate"] / row["default"] for row in rows]
    least = [row["estimate"] / row["need"] for row in rows]
    print(f"own / least {min(slack):.3f} to {max(slack):.3f}; estimate within {WITHIN:.0%} of XLA with its own "
          f"scheduler: {sum(abs(r - 1) <= WITHIN for r in own)} of {len(rows)} ({min(own):.3f} to {max(own):.3f}), "
          f"of the least memory: {sum(abs(r - 1) <= WITHIN for r in least)} of {len(rows)} "
          f"({min(least):.3f} to {max(least):.3f})")


if __name__ == "__main__":
    run_groups(GROUPS, measure, report, lambda row: f"{row['default']:.2f} / {row['need']:.2f}")
