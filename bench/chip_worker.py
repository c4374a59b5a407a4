"""The lent chip's side of ``bench/bench_chip.py``: MaxText's own training of each grid cell, measured.

Runs where the project is not installed (the device tool's TPU machine: Python 3.11, JAX 0.10.2 and its libtpu,
no network), so it imports nothing of the project: the standard library, JAX and MaxText (the payload
``bench_chip.py payload`` builds, on ``PYTHONPATH``).

``python chip_worker.py grid GRID.json OUT.jsonl --budget-s S``

runs each cell of GRID.json (``bench_chip.py`` writes it: a name, MaxText's ``key=value`` settings, the steps) in a
process of its own, forked from this one once it has imported MaxText (the allocator's peaks are a process's),
one after another with the pause the chip needs between programs, and appends one JSON line per cell to
OUT.jsonl: XLA's memory analysis of the train step MaxText compiled, the chip's allocator statistics after the
steps (``Device.memory_stats()``), the loss and seconds of each step as MaxText's metric logger logged them, or
the error that stopped it (out of HBM at compile or at run time). A cell that would not finish within what is
left of ``S`` seconds (by the slowest cell so far) is not started.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

PAUSE_S = 5.0
"""Between two programs: the chip can refuse one started just after another ended (the device tool's notes)."""
CELL_TIMEOUT_S = 240.0
"""The longest a cell may take (a one-chip compile and ten steps take well under a minute): a hang costs no more."""

CHIP_SETTINGS = (
    # None changes the compiled train step: whether the run checkpoints, that one process needs no jax.distributed
    # (which cannot start there: no sockets), whether it writes TensorBoard events.
    "enable_checkpointing=false",
    "skip_jax_distributed_system=true",
    "enable_tensorboard=false",
)


def _stats_dict(stats) -> dict:
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
              "generated_code_size_in_bytes", "host_temp_size_in_bytes", "peak_memory_in_bytes")
    return {name: getattr(stats, name, None) for name in fields}


def run_cell(cell: dict) -> dict:
    """One cell in this process (which must be fresh: the allocator's peaks are since the process started)."""
    started = time.monotonic()
    import jax  # noqa: PLC0415 - after the environment is set
    from maxtext.common import metric_logger
    from maxtext.trainers.pre_train import train
    from maxtext.utils import max_utils

    record: dict = {"name": cell["name"], "jax": jax.__version__, "steps": [], "compiled": None}
    try:
        import importlib.metadata as metadata  # noqa: PLC0415
        record["libtpu"] = metadata.version("libtpu")
    except Exception:  # noqa: BLE001 - the version is a note, never the measurement
        record["libtpu"] = None

    print_compiled = max_utils.print_compiled_memory_stats

    def keep_compiled(stats, prefix=""):
        if prefix == "train" and stats is not None:
            record["compiled"] = _stats_dict(stats)
            record["compiled_at_s"] = round(time.monotonic() - started, 1)
        return print_compiled(stats, prefix=prefix)

    log_training = metric_logger.MetricLogger._log_training_metrics

    def keep_step(self, metrics, step):
        scalars = metrics["scalar"]
        record["steps"].append({
            "step": int(step),
            "seconds": float(scalars["perf/step_time_seconds"]),
            "loss": float(scalars["learning/loss"]),
            "tflops_per_s": float(scalars.get("perf/per_device_tflops_per_sec", 0.0)),
        })
        return log_training(self, metrics, step)

    max_utils.print_compiled_memory_stats = keep_compiled
    metric_logger.MetricLogger._log_training_metrics = keep_step
    base = os.path.join(os.path.dirname(train.__file__), "..", "..", "configs", "base.yml")
    argv = ["train", os.path.normpath(base), *cell["settings"], f"steps={cell['steps']}",
            f"base_output_directory=/tmp/chip-bench/{cell['name']}", f"run_name={cell['name']}", *CHIP_SETTINGS]
    try:
        train.main(argv)
        record["status"] = "ran"
    except BaseException as error:  # noqa: BLE001 - MaxText and XLA raise anything; SystemExit too
        record["status"] = "compile_error" if record["compiled"] is None else "run_error"
        record["error"] = f"{type(error).__name__}: {error}"[-4000:]
        record["traceback"] = traceback.format_exc()[-2000:]
    device = jax.devices()[0]
    record["device"] = f"{device.platform} {getattr(device, 'device_kind', '')}"
    try:
        record["memory_stats"] = device.memory_stats()
    except Exception as error:  # noqa: BLE001 - a CPU device has none
        record["memory_stats"] = None
        record["memory_stats_error"] = str(error)
    record["wall_s"] = round(time.monotonic() - started, 1)
    return record


def _forked(cell: dict, timeout_s: float) -> dict:
    """``run_cell`` in a child forked from this process, which has imported MaxText (seconds saved per cell) and
    started no JAX backend (the chip is opened by the child alone): its record, or why there is none."""
    result, log = f"/tmp/chip-cell-{os.getpid()}.json", f"/tmp/chip-cell-{os.getpid()}.log"
    for path in (result, log):
        if os.path.exists(path):
            os.remove(path)
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:  # the child: its output to the log, its record to the result file, then out without cleanup
        code = 1
        try:
            descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(descriptor, 1)
            os.dup2(descriptor, 2)
            record = run_cell(cell)
            with open(result, "w") as handle:
                json.dump(record, handle)
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        time.sleep(0.5)
    else:
        os.kill(child, 9)
        os.waitpid(child, 0)
        return {"name": cell["name"], "status": "timeout", "log_tail": _tail(log)}
    if os.path.exists(result):
        with open(result) as handle:
            return json.load(handle)
    return {"name": cell["name"], "status": "crashed", "wait_status": status, "log_tail": _tail(log)}


def _tail(path: str, chars: int = 3000) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as handle:
        return handle.read()[-chars:]


def run_grid(grid_path: str, out_path: str, budget_s: float) -> None:
    started = time.monotonic()
    # Imported once here, before any JAX backend exists (no thread either): each forked child opens the chip.
    from maxtext.common import metric_logger  # noqa: F401, PLC0415
    from maxtext.trainers.pre_train import train  # noqa: F401, PLC0415
    print(f"chip_worker: MaxText imported in {time.monotonic() - started:.1f} s", flush=True)
    with open(grid_path) as handle:
        cells = json.load(handle)
    slowest = 0.0
    for cell in cells:
        left = budget_s - (time.monotonic() - started)
        if left < max(slowest, 30.0) + PAUSE_S:
            print(f"chip_worker: {left:.0f} s left, not starting {cell['name']} (slowest so far {slowest:.0f} s)",
                  flush=True)
            break
        began = time.monotonic()
        record = _forked(cell, min(CELL_TIMEOUT_S, left - PAUSE_S))
        record["process_s"] = round(time.monotonic() - began, 1)
        slowest = max(slowest, record["process_s"])
        with open(out_path, "a") as out:
            out.write(json.dumps(record) + "\n")
        steps = record.get("steps") or []
        print(f"chip_worker: {cell['name']}: {record['status']} in {record['process_s']} s, {len(steps)} steps",
              flush=True)
        time.sleep(PAUSE_S)


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "grid" and argv[3] == "--budget-s":
        run_grid(argv[1], argv[2], float(argv[4]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
