"""Recovery of the local elastic job after one training worker is SIGKILLed.

The scenario of tests/test_training_elastic.py (``tests/drill.py``): a local Ray
head, the tiny MaxText model on 2 CPU workers, num_workers=(1, 2), the worker of
``--rank`` killed once the checkpoint of step ``--checkpoint-period`` is
committed and a later step is logged. ``--lose node`` instead runs the two
workers on two local Ray nodes (1 CPU each) and SIGKILLs every process of the
second node, as when a Spot VM is reclaimed: the cluster is then one worker
short and the elastic job must continue on 1. Times come from the workers' own absl log
timestamps; the step time is MaxText's per-step ``seconds`` of the same run, so
the ratio is what to compare across machines.

    .venv/bin/python bench/bench_elastic_recovery.py [--steps 16] [--checkpoint-period 4] [--rank 0] [--lose node]

It also prints rank 0's phases in the first worker group and in the restarted
one: starting (imports, config, mesh, checkpoint lookup or restore), trace +
compile (up to MaxText's compiled-memory line) and JAX's own XLA compilation time
(``JAX_LOG_COMPILES=1`` in the head's environment, which the workers inherit), and
each restart/first ratio: the compilation cache's effect, measured side by side.

Measured on the 2-core, 24 GiB dev machine (CPU only), rank 0 killed, 2 runs:
recovery (kill -> next step) 11.9 and 13.3 s (before the compilation cache and
the paced model: 44-51 s); XLA compilation 8.9 -> 0.35 s and 8.7 -> 0.32 s
(ratio 0.039, 0.036); trace + compile 8.5 -> 1.3 s (0.16); 1 step lost with
checkpoint_period 4; median step 0.33 s.

``--lose node``, 1 run: recovery 39.1 s (before: 90-109 s, most of it the 2-worker
start timing out after Ray Train's default 60 s while the dead node still
counted; the job now sets RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S=20), 3 steps
lost, the new group 1 worker, restoring the checkpoint the 2 workers wrote (Orbax
reshards it); its compile hits the cache only partly (another device count).

``--lose slice`` runs the trainer's TPU branch instead, on a fake-TPU Ray cluster
(``tests/fake_tpu.py``): one local Ray node per host of the dev stack's 2 slices
(2 x v6e-16, 8 nodes; ``--small-slices``: 2 x v5p-16, 4 nodes), the elastic job
the submit command builds for that stack (1..2 slices), JAX on CPU, and every
host of the second slice SIGKILLed mid-run: the job must finish on the first.
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

from tests.drill import kill_a_worker  # noqa: E402
from gke_ray_tpu.training.driver.local_ray import LocalRayHead, LocalRayNode  # noqa: E402


def clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch)) + f".{int(epoch % 1 * 1000):03d}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--checkpoint-period", type=int, default=4)
    parser.add_argument("--rank", type=int, default=0, help="world rank of the worker to kill (0 hosts JAX's coordinator)")
    parser.add_argument("--lose", choices=("worker", "node", "slice"), default="worker")
    parser.add_argument("--small-slices", action="store_true", help="--lose slice: 2 hosts a slice, not 4")
    args = parser.parse_args()
    # The workers inherit the local head's environment: JAX logs each XLA compilation and its time.
    os.environ["JAX_LOG_COMPILES"] = "1"
    with tempfile.TemporaryDirectory(prefix="bench-elastic-") as tmp:
        out = Path(tmp)
        drill = dict(steps=args.steps, checkpoint_period=args.checkpoint_period)
        if args.lose == "slice":
            d = _lose_a_slice(out, args)
        elif args.lose == "worker":
            with LocalRayHead(num_cpus=2, log_path=out / "ray-head.log") as head:
                d = kill_a_worker(head, out, "bench-elastic", rank=args.rank, **drill)
        else:
            # A head other nodes join: Ray gives it (and the node) the machine's outward address.
            with LocalRayHead(num_cpus=1, log_path=out / "ray-head.log", multi_node=True) as head, \
                    LocalRayNode(head, num_cpus=1, log_path=out / "ray-node.log") as node:
                d = kill_a_worker(head, out, "bench-elastic", rank=None, node=node, **drill)
    if d.status != "SUCCEEDED":
        print(f"job {d.status} (submit exit {d.returncode}):\n{d.stderr}", file=sys.stderr)
        return 1
    r = d.recovery()
    step_s = d.median_step_s()
    resumed = d.resumed_group
    workers = {"worker": "2 CPU workers (min 1) on 1 node", "node": "2 CPU workers (min 1) on 2 nodes",
               "slice": f"{d.killed_group.workers} TPU workers (2 fake slices, min 1 slice), one per fake host"}
    print(f"run: {args.steps} steps, checkpoint_period {args.checkpoint_period}, {workers[args.lose]}; "
          f"wall {d.wall_s:.0f} s, {len(d.progress.steps)} steps completed, job {d.status}")
    what = {"worker": f"rank {d.killed_rank} (pid {d.killed_pid})",
            "node": f"the second node (ray start pid {d.killed_pid}, all its processes)",
            "slice": "every host of the second slice (all their processes)"}[args.lose]
    print(f"killed {what} at {clock(d.killed_at)}, the log at step "
          f"{d.last_step_seen}; the group's last step {max(d.killed_group.steps)}; "
          f"committed checkpoints: {d.checkpoints_at_kill}")
    print(f"new worker group ({resumed.workers} workers) logging at  +{r['group_started_s']:.1f} s")
    print(f"MaxText restored checkpoint {resumed.restored_step} at   +{r['restored_s']:.1f} s")
    print(f"next completed step ({resumed.restored_step + 1}) at       "
          f"{clock(d.killed_at + r['next_step_s'])}  (+{r['next_step_s']:.1f} s)")
    print(f"recovery (kill -> next step): {r['next_step_s']:.1f} s")
    first, again = d.phases(d.killed_group), d.phases(resumed)
    print("phases of rank 0          first run   restart   restart/first")
    for key, label in (("starting_s", "start (imports..restore)"), ("compiling_s", "trace + compile"),
                       ("xla_s", "XLA compilation")):
        print(f"  {label:<24}{first[key]:>8.2f} s {again[key]:>8.2f} s   {again[key] / first[key]:>8.3f}")
    print(f"steps lost (run twice): {d.steps_lost} (checkpoint period {args.checkpoint_period})")
    print(f"median step time: {step_s:.3f} s -> recovery = {r['next_step_s'] / step_s:.0f} x step time")
    return 0


def _lose_a_slice(out: Path, args):
    from tests.fake_tpu import BENCH_STACK, TEST_STACK, FakeTpuCluster, elastic_job, lose_a_slice, tpu_stack

    stack = tpu_stack(**(TEST_STACK if args.small_slices else BENCH_STACK))
    job = elastic_job(stack, out, "bench-slice-loss", args.steps, args.checkpoint_period)
    with FakeTpuCluster(stack, out) as cluster:
        for name in cluster.slice_names():
            cluster.start_slice(name)
        return lose_a_slice(cluster, job, lost=cluster.slice_names()[-1], timeout_s=1800)


if __name__ == "__main__":
    sys.exit(main())
