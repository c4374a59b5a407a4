"""What reading the cluster's KubeRay CRDs costs a preview: the dev stack's offline run, side by side in one process,
against a cluster that serves the mock engine's cut CRDs (the few fields the stack checks) and one that serves
KubeRay's whole CRDs (``tests/crds/kuberay``, 290 and 419 KB of JSON), as a real cluster does.

The stack reads both CRDs before its RayCluster and runs (``components.ray_tpu_cluster.served_kuberay``); the
Python SDK hands each read's ``spec`` to the check as one value. Joining the two specs with ``Output.all`` unwraps
every node of both schemas into an Output of its own; each spec now comes down to its problems first.

    .venv/bin/python bench/bench_crd_read.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gke_ray_tpu.stack.mock_engine import MockGke, load_stack_file, run_offline  # noqa: E402
from tests.schemas import served_kuberay_crds  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    config = load_stack_file(REPO / "Pulumi.dev.yaml")
    run_offline(config)  # the imports and the first run's caches, counted in neither column
    seconds: dict[str, list[float]] = {"cut CRDs": [], "whole CRDs": []}
    for _ in range(args.rounds):
        for label, gke in (("cut CRDs", MockGke()), ("whole CRDs", MockGke(**served_kuberay_crds()))):
            started = time.process_time()
            run_offline(config, gke=gke)
            seconds[label].append(time.process_time() - started)
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    print(f"the dev stack's offline run, CPU seconds over {args.rounds} rounds (median):")
    for label, values in seconds.items():
        print(f"  {label:<11} {medians[label]:6.2f}  ({', '.join(f'{v:.2f}' for v in values)})")
    print(f"  whole / cut {medians['whole CRDs'] / medians['cut CRDs']:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
