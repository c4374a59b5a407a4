"""XLA's HBM figures for a run with and without the XLA flags the TPU pods get, side by side.

The compile check (``gke_ray_tpu.preflight.xla_check``) compiles a run under the dev stack's
pods' ``LIBTPU_INIT_ARGS`` (``gke_ray_tpu.preflight.xla_check.pod_flags``); this bench compiles
the same jobs a second time with no flags at all, as the check did before, so
the two peaks stand in one table, with each compile's wall time and peak RSS.
Then what an unchanged run costs: a cached answer, and the preview command with
``--compile`` against without. Last, the tutorial's own flag list on the tiny
model, for each TPU generation: whether libtpu accepts it.
Results land in the compile check's cache: a second run prints at once (point
``GKE_RAY_TPU_CACHE_DIR`` at an empty directory to measure the compiles again).

    nice -n 10 .venv/bin/python bench/bench_compile_flags.py [--only 8b 70b-bf16 ...] [--skip-generations]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gke_ray_tpu.core.libtpu_flags import TUTORIAL_XLA_FLAGS  # noqa: E402
from gke_ray_tpu.core.job_spec import DATA_MOUNT, build_job  # noqa: E402
from gke_ray_tpu.core.presets import get_preset  # noqa: E402
from gke_ray_tpu.core.tpu_catalogue import slice_shape  # noqa: E402
from gke_ray_tpu.stack.parse import parse_stack_config  # noqa: E402
from gke_ray_tpu.stack.mock_engine import load_stack_file  # noqa: E402
from gke_ray_tpu.stack.plan import plan_stack  # noqa: E402
from gke_ray_tpu.preflight.xla_check import XlaResult, compile_check, request_for_job  # noqa: E402

RUNS: dict[str, tuple[str, dict]] = {
    # name: (preset, overrides), on the dev stack's 2 x v6e-16
    "8b": ("llama3-8b", {}),
    "70b-tutorial": ("llama3-70b", {}),
    "70b-bf16-pdbs1": ("llama3-70b", {"weight_dtype": "bfloat16", "per_device_batch_size": 1}),
}
SLICES = 2
BENCH_TIMEOUT_S = 3 * 3600.0
"""The check's own 30 min is not enough for an 8B compile on two cores shared with other jobs (it took 25 min)."""
GENERATION_TOPOLOGIES = {"v4": "2x2x2", "v5e": "4x4", "v5p": "2x2x2", "v6e": "4x4", "tpu7x": "2x2x2"}
"""One multi-host slice per generation, for the tiny model under the tutorial's flags."""


def _quiet(_: str) -> None:
    pass


def compiled(spec, flags, shape=None) -> XlaResult:
    """XLA's answer; its ``wall_seconds`` is the compile's own, also when it comes from the cache."""
    return compile_check(request_for_job(spec, flags, shape, SLICES), progress=_quiet, timeout_s=BENCH_TIMEOUT_S)


def figure(result: XlaResult) -> str:
    if result.fits is None:
        return "refused"
    kind = "peak" if result.fits else "needs"
    return f"{result.peak_hbm_gib:6.2f} {kind}"


def flags_table(names: list[str]) -> list:
    cfg = parse_stack_config(load_stack_file(REPO / "Pulumi.dev.yaml"))
    flags = plan_stack(cfg).pod_flags
    print(f"The dev stack's pods' flags ({len(flags)}): {' '.join(flags)}\n")
    print("| run (2 x v6e-16) | no flags (GiB) | pods' flags (GiB) | pods / none | temporaries none -> pods | wall s none, pods | RSS GiB |")
    print("|---|---|---|---|---|---|---|")
    requests = []
    for name in names:
        preset, overrides = RUNS[name]
        spec = build_job(
            get_preset(preset), base_output_directory=DATA_MOUNT + "/", run_name=name, slices=SLICES,
            overrides=overrides, generation=cfg.tpu_generation, topology=cfg.tpu_topology,
        )
        bare, pods = compiled(spec, ()), compiled(spec, flags)
        ratio = pods.peak_hbm_gib / bare.peak_hbm_gib if pods.peak_hbm_gib and bare.peak_hbm_gib else float("nan")
        temps = " -> ".join(
            "-" if r.outcome.get("temp_bytes") is None else f"{r.outcome['temp_bytes'] / 2**30:.2f}" for r in (bare, pods)
        )
        rss = max(r.outcome.get("peak_rss_mib", 0) for r in (bare, pods)) / 1024
        walls = f"{bare.wall_seconds:.0f}, {pods.wall_seconds:.0f}"
        print(f"| {name} | {figure(bare)} | {figure(pods)} | {ratio:.3f} | {temps} | {walls} | {rss:.1f} |", flush=True)
        requests.append(pods.request)
    return requests


def unchanged_run(requests: list, repeats: int) -> None:
    """An unchanged run: one cached answer, and the whole preview command with --compile against without."""
    hits = []
    for _ in range(repeats):
        for request in requests:
            started = time.perf_counter()
            compile_check(request, progress=_quiet)
            hits.append((time.perf_counter() - started) * 1000)
    print(f"\nA cached answer: median {statistics.median(hits):.1f} ms, max {max(hits):.1f} ms ({len(hits)} look-ups)")
    command = [sys.executable, "-m", "gke_ray_tpu.stack.preview", "--section", "training"]
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats):
        for compile_too in (False, True):
            started = time.perf_counter()
            subprocess.run(command + ["--compile"] * compile_too, cwd=REPO, check=True, capture_output=True)
            seconds[compile_too].append(time.perf_counter() - started)
    plain, cached = (statistics.median(seconds[flag]) for flag in (False, True))
    print(f"python -m gke_ray_tpu.stack.preview --section training: {plain:.2f} s; with --compile, answered from the cache: "
          f"{cached:.2f} s ({cached / plain:.2f}x; median of {repeats})")


def generations_table() -> None:
    tiny = build_job(get_preset("tiny-cpu"), base_output_directory=DATA_MOUNT + "/", run_name="flags", slices=SLICES)
    print("\nThe tutorial's flags on the tiny model, per generation (libtpu's answer):\n")
    print("| slice | the tutorial's 8 flags | without --xla_tpu_enable_async_collective_fusion_fuse_all_gather |")
    print("|---|---|---|")
    without = tuple(flag for flag in TUTORIAL_XLA_FLAGS if "fuse_all_gather" not in flag)
    for generation, topology in GENERATION_TOPOLOGIES.items():
        shape = slice_shape(generation, topology)
        answers = []
        for flags in (TUTORIAL_XLA_FLAGS, without):
            result = compiled(tiny, flags, shape)
            answers.append("compiles" if result.fits else f"refused: {result.message.removeprefix('JaxRuntimeError: ')[:70]}...")
        print(f"| {SLICES} x {shape.maxtext_accelerator} | {answers[0]} | {answers[1]} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", choices=sorted(RUNS), help="compile only these runs")
    parser.add_argument("--skip-generations", action="store_true", help="leave out the per-generation table")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the cached look-ups and preview commands (0: none)")
    args = parser.parse_args()
    requests = flags_table(list(RUNS) if args.only is None else args.only)
    if args.repeats and requests:
        unchanged_run(requests, args.repeats)
    if not args.skip_generations:
        generations_table()


if __name__ == "__main__":
    main()
