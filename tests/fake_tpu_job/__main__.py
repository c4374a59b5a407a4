"""The job's entry point on a fake-TPU Ray cluster (``tests/fake_tpu.py``): ``gke_ray_tpu.training.worker.trainer``
with the argv a TPU stack's job has, and one piece of it stood in.

The TPU workers' runtime env installs what the head lacks of the lock (with libtpu) through uv, which needs
PyPI and a TPU host; here the workers run the MaxText of this venv with JAX on CPU instead. Everything else, the
ScalingConfig (use_tpu, topology, accelerator type, TPU per worker, SPREAD), the FailureConfig and the
rest of the RunConfig, is the trainer's own; a test may also hold a one-slice group after a checkpoint (``hold``),
and shorten two waits: for slices that do not come (:data:`SLICE_WAIT_ENV`) and between Ray Train's looks for
more slices (:data:`RESIZE_CHECK_ENV`).
Shipped to the job as a package of its own (``py_modules``), run as ``python -m fake_tpu_job``.
"""

from __future__ import annotations

import os
import sys

from gke_ray_tpu.training.worker import trainer

from . import hold

CPU_STAND_IN_ENV = {**trainer.WORKER_ENV, "JAX_PLATFORMS": "cpu"}
"""The workers' environment in place of the uv install: the trainer's own variables, JAX on CPU."""
SLICE_WAIT_ENV = "FAKE_TPU_SLICE_WAIT_S"
"""Set by a test to shorten the trainer's wait for slices that do not come (GKE's 15 minutes)."""
RESIZE_CHECK_ENV = "FAKE_TPU_RESIZE_CHECK_S"
"""Set by a test to shorten the wait between Ray Train's looks for more slices while its group trains
(``ScalingConfig.elastic_resize_monitor_interval_s``, 60 s): on a fake cluster the lost slice's hosts are back in
seconds, not the minutes GKE takes to provision them."""


def _stand_in_run_config(spec):
    config = _trainer_run_config(spec)
    if config.worker_runtime_env != trainer.tpu_worker_env(trainer.installed_here()):
        raise AssertionError(f"the TPU workers' runtime env changed: {config.worker_runtime_env}")
    config.worker_runtime_env = {"env_vars": CPU_STAND_IN_ENV}
    return config


def _stand_in_scaling_config(spec):
    import dataclasses

    return dataclasses.replace(_trainer_scaling_config(spec),
                               elastic_resize_monitor_interval_s=float(os.environ[RESIZE_CHECK_ENV]))


_trainer_run_config = trainer.run_config
_trainer_scaling_config = trainer.scaling_config


def main() -> int:
    trainer.run_config = _stand_in_run_config
    if SLICE_WAIT_ENV in os.environ:
        trainer.SLICE_WAIT_S = float(os.environ[SLICE_WAIT_ENV])
    if RESIZE_CHECK_ENV in os.environ:
        trainer.scaling_config = _stand_in_scaling_config
    if hold.HOLD_ENV in os.environ:
        trainer.train_loop_per_worker = hold.train_loop_per_worker
    return trainer.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
