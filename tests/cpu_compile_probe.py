"""One process of a 2-process JAX run on CPU, as the trainer's CPU workers run it (tests/test_cpu_compile_sharing.py).

``python -m tests.cpu_compile_probe RANK ADDRESS CACHE_DIR trainer|jax``: with ``trainer`` the process first calls
the trainer's :func:`share_compiled_programs_across_cpu_processes`, with ``jax`` it runs JAX as it comes. It
compiles one program over both processes' devices and prints, as one JSON line, what JAX's compiler logged
for it: a hit in the persistent cache, a miss, a wait for the binary another process compiles.
"""

from __future__ import annotations

import json
import logging
import os
import sys

PROGRAM = "probe"
EVENTS = {"hit": "Persistent compilation cache hit for", "miss": "PERSISTENT COMPILATION CACHE MISS for",
          "waited": "Waiting for module:"}


class _Events(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = {name: False for name in EVENTS}

    def emit(self, record):
        message = record.getMessage()
        if f"jit_{PROGRAM}" in message:
            for name, text in EVENTS.items():
                self.seen[name] |= message.startswith(text)


def main(rank: int, address: str, cache_dir: str, mode: str) -> None:
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if mode == "trainer":
        from gke_ray_tpu.training.worker.trainer import share_compiled_programs_across_cpu_processes

        share_compiled_programs_across_cpu_processes()
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.distributed.initialize(address, num_processes=2, process_id=rank, initialization_timeout=60)
    events = _Events()
    compiler_log = logging.getLogger("jax._src.compiler")
    compiler_log.setLevel(logging.DEBUG)
    compiler_log.addHandler(events)

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), PartitionSpec("d"))

    def probe(x):
        return (x * 2).sum()

    x = jax.make_array_from_process_local_data(sharding, np.ones((4,), np.float32))
    total = float(jax.jit(probe, in_shardings=sharding)(x))
    print(json.dumps({"rank": rank, "total": total, **events.seen}), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
