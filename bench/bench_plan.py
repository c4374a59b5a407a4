"""How long the offline preview takes, as a multiple of importing the Pulumi SDKs alone.

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
    "... + the gcp/k8s modules the stack uses": [
        sys.executable,
        "-c",
        "import pulumi_gcp.compute, pulumi_gcp.container, pulumi_gcp.storage, pulumi_gcp.organizations,"
        " pulumi_kubernetes.core.v1, pulumi_kubernetes.apiextensions, pulumi_kubernetes.resource.v1",
    ],
    "python -m stack.preview (dev stack)": [sys.executable, "-m", "stack.preview", "--stack", "dev"],
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
    print(f"plan / bare SDK import = {plan / bare:.2f}x")
    print(f"plan / import of the modules it uses = {plan / modules:.2f}x")


if __name__ == "__main__":
    main()
