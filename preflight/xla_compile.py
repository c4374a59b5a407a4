"""The compile check's child process: MaxText's own AOT compile of one run, XLA's memory figures as JSON.

``python -m gke_ray_tpu.preflight.xla_compile REQUEST.json RESULT.json`` is started by
:mod:`gke_ray_tpu.preflight.xla_check` (never imported by it: libtpu, JAX and MaxText stay in
this process, with the environment the parent gives it). It runs MaxText's
``train_compile.main`` (the train step MaxText would run, for
``compile_topology`` and ``compile_topology_num_slices``, with no TPU attached)
and keeps the compiled object MaxText builds, then writes one JSON object:

- ``status: "compiled"`` with ``compiled.memory_analysis()`` in bytes (per
  device), ``hbm_limit_gib``, the HBM XLA allows one device of that topology, and
  ``peak_buffers``, the largest buffers live at XLA's peak (their shapes and the
  JAX operations that made them, :mod:`gke_ray_tpu.preflight.xla_live_set`, from XLA's
  dump of the train step, which MaxText writes to ``dump_hlo_local_dir``) and
  ``live_set_bytes``, the bytes in use at that peak as the dump shows them, for a
  reader to set against ``peak_bytes``;
- ``status: "oom"``: XLA's ``CompileTimeHbmOom`` (or ``Used X of Y hbm``)
  message, with what it says is needed and what is available;
- ``status: "error"``: MaxText or XLA refused the run for another reason.

Each with the wall time and the peak RSS of this process. A crash writes
nothing; the parent reports that and caches nothing.
"""

from __future__ import annotations

import json
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

from gke_ray_tpu.preflight.xla_live_set import live_set_at_peak

PEAK_BUFFERS_KEPT = 400
"""Buffers at XLA's peak kept with the verdict, largest first, those of 1 MiB or more: enough to itemise the peak
(a model's weights, their gradients and optimizer state alone are hundreds of buffers), few enough for a cache
entry of tens of kilobytes."""
PEAK_BUFFER_MIN_BYTES = 2**20

_UNITS = {"B": 2**-30, "K": 2**-20, "M": 2**-10, "G": 1.0, "T": 2**10}
# XLA prints sizes with tsl's HumanReadableNumBytes: base 1024, so its "G" is GiB.
_SIZE = r"([\d.]+)([BKMGT])"
_OOM_PATTERNS = (
    # CompileTimeHbmOom: ... required for HLO temporaries (46.85G) exceeds available HBM (31.24G)
    re.compile(rf"required for HLO temporaries \({_SIZE}\) exceeds available HBM \({_SIZE}\)"),
    # Ran out of memory in memory space hbm. Used 40.00G of 31.24G hbm.
    re.compile(rf"Used {_SIZE} of {_SIZE} hbm"),
)


def _gib(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit]


def parse_oom(message: str) -> tuple[float, float] | None:
    """(needed GiB, available GiB) from XLA's out-of-HBM message, or None for any other error."""
    for pattern in _OOM_PATTERNS:
        match = pattern.search(message)
        if match:
            return _gib(*match.group(1, 2)), _gib(*match.group(3, 4))
    return None


def hbm_limit_gib(compile_topology: str, num_slices: int) -> float:
    """The HBM XLA lets one device of the topology use, in its own words.

    ``memory_analysis()`` does not state the limit, and a topology without
    hardware has no ``memory_stats()``, so compile a program that cannot fit
    (a sort of a ~335 GiB matrix, refused within a second) and read the
    "available HBM" of XLA's refusal.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.topologies import get_topology_desc
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from maxtext.utils.accelerator_to_spec_map import get_system_characteristics

    target = get_system_characteristics(compile_topology)
    devices = get_topology_desc(
        platform=target.platform,
        topology_name=target.topology_name,
        chip_config_name=target.chip_config_name,
        chips_per_host_bounds=target.chips_per_host_bounds,
        num_slices=num_slices,
        wrap=target.wrap,
    ).devices
    one = NamedSharding(Mesh(np.array(devices[:1]), ("x",)), PartitionSpec())
    too_big = jax.jit(lambda a: jnp.sort(jnp.outer(a, a), axis=1), in_shardings=one, out_shardings=one)
    try:
        too_big.trace(jax.ShapeDtypeStruct((300_000,), jnp.float32, sharding=one)).lower().compile()
    except Exception as error:  # noqa: BLE001 - XLA raises its runtime error type
        found = parse_oom(str(error))
        if found:
            return found[1]
        raise
    raise RuntimeError(f"XLA compiled a 335 GiB program for {compile_topology}: no HBM limit to read")


def compile_run(maxtext_argv: list[str], compile_topology: str, num_slices: int) -> dict:
    """MaxText's train_compile for the run; XLA's figures or its refusal."""
    from maxtext.trainers.pre_train import train_compile

    compiled = []
    jit_and_compile = train_compile.jit_and_compile

    def keep(*args, **kwargs):
        compiled.append(jit_and_compile(*args, **kwargs))
        return compiled[-1]

    # main() prints the memory analysis but returns nothing: keep the object it compiles.
    train_compile.jit_and_compile = keep
    with tempfile.TemporaryDirectory(prefix="xla-check-") as scratch:
        dump = Path(scratch, "xla_dump")
        argv = [
            "train_compile",
            *maxtext_argv,
            f"compile_topology={compile_topology}",
            f"compile_topology_num_slices={num_slices}",
            # An AOT compile cannot use JAX's persistent cache, and the run's own
            # (/data/jax-cache, ~/jax_cache by default) is not this machine's to write.
            f"jax_cache_dir={scratch}",
            # MaxText dumps the train step's HLO (--xla_dump_to) whenever XLA_FLAGS is unset, by default to
            # /tmp/xla_dump, where concurrent compiles overwrite each other: this compile's own directory.
            f"dump_hlo_local_dir={dump}",
        ]
        try:
            train_compile.main(argv)
        except Exception as error:  # noqa: BLE001 - MaxText and XLA raise anything
            message = str(error).strip() or type(error).__name__
            found = parse_oom(message)
            if found:
                return {"status": "oom", "needed_gib": found[0], "available_gib": found[1], "message": message}
            return {"status": "error", "message": f"{type(error).__name__}: {message}"}
        stats = compiled[-1].memory_analysis()
        live = live_set_at_peak(dump)
        peak = [buffer.to_json() for buffer in (live.buffers if live else [])[:PEAK_BUFFERS_KEPT]
                if buffer.bytes >= PEAK_BUFFER_MIN_BYTES]
    return {
        "status": "compiled",
        "peak_bytes": stats.peak_memory_in_bytes,
        "argument_bytes": stats.argument_size_in_bytes,
        "output_bytes": stats.output_size_in_bytes,
        "alias_bytes": stats.alias_size_in_bytes,
        "temp_bytes": stats.temp_size_in_bytes,
        "generated_code_bytes": stats.generated_code_size_in_bytes,
        "hbm_limit_gib": hbm_limit_gib(compile_topology, num_slices),
        "peak_buffers": peak,
        "live_set_bytes": live.bytes if live else None,
    }


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    request = json.loads(Path(request_path).read_text())
    started = time.monotonic()
    result = compile_run(request["maxtext_argv"], request["compile_topology"], request["num_slices"])
    result["compile_seconds"] = round(time.monotonic() - started, 1)
    # ru_maxrss is in KiB on Linux.
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    Path(result_path).write_text(json.dumps(result))
    print(f"xla_compile: {result['status']} in {result['compile_seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
