"""Checkpoint save and restore seconds per state size: a local directory and an emulated gs:// bucket, side by side.

MaxText's own checkpoint manager (``create_orbax_checkpoint_manager``, Orbax's v1 training Checkpointer,
OCDBT on, synchronous) saves and restores a state of float32 arrays of each size, three times, in a
process of its own per storage (``tests/orbax_probe.py``): a temporary local directory (Orbax's
atomic-rename path, what the pods' /data mount was) and ``gs://`` on a Cloud Storage emulator on
127.0.0.1 (``tests/gcs_emulator.py``; Orbax's commit-marker path, what cluster runs now use). The
emulator keeps objects in memory and answers over loopback HTTP, so the gs:// column is the clients'
overhead (tensorstore, gcsfs, one request per object) rather than Cloud Storage's throughput, and a
GCS FUSE mount (which would copy every object of a step again to rename it) is not measured at all.

    .venv/bin/python bench/bench_checkpoint_io.py [--sizes 4 64 256]

Measured on the 2-core dev machine (CPU only), medians of 3, two runs (README, "Checkpoints: straight
to the bucket"): save 4 / 64 / 256 MiB local 0.07-0.08 / 0.13-0.15 / 0.15-0.28 s, emulated gs:// 0.15-0.22 /
0.25-0.50 / 0.33-0.47 s (ratio 1.7-3.3); restore local 0.03 / 0.21-0.36 / 0.35-0.80 s, gs:// 0.08 /
0.22-0.45 / 0.37-0.87 s (ratio 1.04-3.2, ~1.1 from 64 MiB on).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.gcs_emulator import GcsEmulator  # noqa: E402


def probe(directory: str, sizes: list[int], env: dict) -> dict:
    done = subprocess.run([sys.executable, "-m", "tests.orbax_probe", "time", directory, *map(str, sizes)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(f"probe of {directory} failed:\n{done.stderr[-3000:]}")
    return {int(size): times for size, times in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 64, 256], help="state sizes in MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp, \
            GcsEmulator("bench-checkpoints", Path(tmp) / "fake-gcs-server.log") as gcs:
        env = dict(os.environ, **gcs.env, JAX_PLATFORMS="cpu")
        local = probe(str(Path(tmp) / "local"), args.sizes, env)
        bucket = probe("gs://bench-checkpoints/bench", args.sizes, env)
    print("MaxText checkpoint manager, synchronous save / restore, median of 3 (seconds); gs:// is an emulator on 127.0.0.1")
    print(f"{'MiB':>6} {'save local':>11} {'save gs://':>11} {'ratio':>7} {'restore local':>14} {'restore gs://':>14} {'ratio':>7}")
    for size in args.sizes:
        lo, gs = local[size], bucket[size]
        print(f"{size:>6} {lo['save_s']:>11.3f} {gs['save_s']:>11.3f} {gs['save_s'] / lo['save_s']:>7.2f} "
              f"{lo['restore_s']:>14.3f} {gs['restore_s']:>14.3f} {gs['restore_s'] / lo['restore_s']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
