"""The trainer's CPU workers compile each program once (``share_compiled_programs_across_cpu_processes``).

Two real JAX processes on CPU (``tests/cpu_compile_probe.py``) run one program over both, twice on one
persistent cache: as JAX comes, and as the trainer's CPU workers (local runs, fake-TPU hosts) run it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from gke_ray_tpu.training.driver.local_ray import free_ports

PROBE_TIMEOUT_S = 120


def run_both(cache_dir, mode: str) -> dict[int, dict]:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    procs = [subprocess.Popen([sys.executable, "-m", "tests.cpu_compile_probe", str(rank), address, str(cache_dir), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    try:
        outputs = [proc.communicate(timeout=PROBE_TIMEOUT_S) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    results = {}
    for rank, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}: {err[-2000:]}"
        results[rank] = json.loads(out.strip().splitlines()[-1])
        assert results[rank]["total"] == 16.0  # 2 processes x 4 ones, doubled
    return results


def test_as_jax_comes_the_second_process_misses_the_cache_on_every_run(tmp_path):
    """The behaviour the trainer works around: on CPU the key differs per process and only process 0 writes."""
    first, second = run_both(tmp_path, "jax"), run_both(tmp_path, "jax")
    assert first[1]["miss"] and second[1]["miss"] and not second[1]["hit"]
    assert second[0]["hit"]


def test_the_trainers_cpu_workers_compile_once_and_find_it_on_the_next_run(tmp_path):
    first, second = run_both(tmp_path, "trainer"), run_both(tmp_path, "trainer")
    # The cold run: process 0 compiles; process 1 does not compile the program too. It waits for process 0's
    # binary or, where process 0 wrote it to the cache first (a busy machine), finds it there under the same key.
    # A miss not followed by a wait is a compile of its own.
    assert first[0]["miss"] and not first[0]["waited"]
    assert first[1]["waited"] if first[1]["miss"] else first[1]["hit"], first[1]
    # The next run (a restarted worker group): both find it in the cache.
    assert second[0]["hit"] and second[1]["hit"]
    assert not second[1]["miss"] and not second[1]["waited"]
