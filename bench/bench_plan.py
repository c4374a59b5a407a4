"""How long the offline preview takes, as a multiple of importing the Pulumi SDKs (bare, and with every class the stack uses loaded).

Both commands run as fresh processes, alternated in one session so machine
noise hits both alike; the ratio is what to compare across machines.

    .venv/bin/python bench/bench_plan.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {
    "import pulumi + pulumi_gcp + pulumi_kubernetes": [sys.executable, "-c", "import pulumi, pulumi_gcp, pulumi_kubernetes"],
    # pulumi_gcp and pulumi_kubernetes load a module's classes on first attribute access,
    # so the baseline touches every class and function the stack uses.
    "... + the gcp/k8s classes the stack uses": [
        sys.executable,
        "-c",
        "import pulumi_gcp as g, pulumi_kubernetes as k;"
        " [g.compute.Network, g.compute.Subnetwork, g.compute.Firewall, g.compute.ResourcePolicy,"
        " g.container.Cluster, g.container.NodePool, g.container.get_engine_versions, g.container.get_cluster,"
        " g.storage.Bucket, g.storage.BucketIAMMember, g.organizations.get_project_output,"
        " k.Provider, k.core.v1.ServiceAccount, k.core.v1.Namespace, k.meta.v1.ObjectMetaArgs,"
        " k.resource.v1.ResourceClaimTemplate, k.apiextensions.CustomResource]",
    ],
    "python -m gke_ray_tpu.stack.preview (dev stack)": [sys.executable, "-m", "gke_ray_tpu.stack.preview", "--stack", "dev"],
}


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for round_ in range(repeats):
        for name, command in COMMANDS.items():
            samples[name].append(timed(command))
        print(f"round {round_ + 1}/{repeats} done", file=sys.stderr)
    bare, modules, plan = (statistics.median(samples[name]) for name in COMMANDS)
    for name, values in samples.items():
        print(f"{name:<50} median {statistics.median(values):6.2f} s  (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})")
    print(f"preview / bare SDK import = {plan / bare:.2f}x")
    print(f"preview / loading the classes it uses = {plan / modules:.2f}x")


if __name__ == "__main__":
    main()
