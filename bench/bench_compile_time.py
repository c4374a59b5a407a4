"""How long the compile check takes the first time, today's way against the way it compiles now, side by side.

Before (``check_job(..., exact_flags=True, jobs=1)``): the run's own train step under the pods' flags, one
slice count after the other. Now (``check_job``): the run without the flags, and a small model on the same
mesh under them (whether libtpu takes them), every compile at once (:func:`gke_ray_tpu.preflight.xla_check.parallel_compiles`).
Each case starts from an empty cache (the first time a run is checked). It prints each way's wall time,
the load average before and after (this machine is shared; a figure from a loaded machine says so), and
that both ways give the same verdict and peak at every count.

    nice -n 5 .venv/bin/python bench/bench_compile_time.py [--only 8b 8b-elastic] [--skip-before]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gke_ray_tpu.core.job_spec import DATA_MOUNT, build_job  # noqa: E402
from gke_ray_tpu.core.presets import get_preset  # noqa: E402
from gke_ray_tpu.preflight import xla_check  # noqa: E402
from gke_ray_tpu.stack.plan import plan_stack  # noqa: E402
from gke_ray_tpu.stack.parse import parse_stack_config  # noqa: E402
from gke_ray_tpu.stack.mock_engine import load_stack_file  # noqa: E402

CASES = {
    # name: (preset, slice counts) on the dev stack's 2 x v6e-16
    "8b": ("llama3-8b", (2,)),
    "8b-elastic": ("llama3-8b-elastic", (1, 2)),
}
BENCH_TIMEOUT_S = 3 * 3600.0


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def timed(spec, flags, counts, **options) -> tuple[float, xla_check.SliceCountResults, str]:
    with tempfile.TemporaryDirectory(prefix="compile-time-") as cache:
        os.environ[xla_check.CACHE_DIR_ENV] = cache
        before = _load()
        started = time.monotonic()
        results = xla_check.check_job(spec, flags, counts, progress=lambda _: None, timeout_s=BENCH_TIMEOUT_S, **options)
        return time.monotonic() - started, results, f"{before} -> {_load()}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", choices=sorted(CASES))
    parser.add_argument("--skip-before", action="store_true", help="time only the way it compiles now")
    args = parser.parse_args()
    cfg = parse_stack_config(load_stack_file(REPO / "Pulumi.dev.yaml"))
    flags = plan_stack(cfg).pod_flags
    print(f"{os.cpu_count()} cores; {xla_check.parallel_compiles()} compiles at once; load average 1/5/15 min as shown\n")
    print("| run (dev stack, v6e-16) | slice counts | way | wall s | load before -> after | verdict, peak GiB per count |")
    print("|---|---|---|---|---|---|")
    for name in args.only or CASES:
        preset, counts = CASES[name]
        spec = build_job(get_preset(preset), base_output_directory=DATA_MOUNT + "/", run_name=name,
                         slices=max(counts), generation=cfg.tpu_generation, topology=cfg.tpu_topology)
        # The way it compiles now first: on a shared machine its figure is the one a deadline may cut short.
        ways = [("now: no flags + small model under them, at once", {})]
        if not args.skip_before:
            ways.append(("before: under the pods' flags, one at a time", {"exact_flags": True, "jobs": 1}))
        answers = []
        for way, options in ways:
            seconds, results, load = timed(spec, flags, counts, **options)
            shown = ", ".join(f"{n}: {r.verdict().split(' (')[0]} {r.peak_hbm_gib:.2f}" for n, r in sorted(results.by_slices.items()))
            print(f"| {preset} | {', '.join(map(str, counts))} | {way} | {seconds:.0f} | {load} | {shown} |", flush=True)
            answers.append({n: (r.fits, round(r.peak_hbm_gib or 0, 4)) for n, r in results.by_slices.items()})
        if len(answers) == 2:
            print(f"| | | same verdicts and peaks both ways: {answers[0] == answers[1]} | | | |")


if __name__ == "__main__":
    main()
