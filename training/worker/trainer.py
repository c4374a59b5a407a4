"""The trainer: Ray Train v2's JaxTrainer running MaxText's pre-training loop.

Run on the Ray head as the job's entry point::

    python -m gke_ray_tpu.training.worker.trainer --generation v6e --topology 4x4 --slices 2 \\
        src/maxtext/configs/base.yml base_output_directory=gs://<bucket>/ ... run_name=...

(``--min-slices N`` makes it elastic). This is the tutorial's
``maxtext_multi_slice_trainer.py`` / ``maxtext_elastic_trainer.py`` in one
module. ``--backend cpu`` runs the same thing on local CPU workers: no TPU
resources, JAX on CPU, and the JAX distributed runtime set up here because
Ray's JAX backend only does that for TPUs and GPUs.

Recovery is MaxText's own: every restart (a new worker group after a failure,
or after an elastic resize) calls MaxText again with the same run_name, and
MaxText resumes from the latest Orbax checkpoint under
``<base_output_directory>/<run_name>/checkpoints``. Ray Train v2 restarts by
killing the whole group and starting new worker actors, i.e. new processes, so
``jax.distributed`` starts from scratch each time (on CPU a new coordinator on
a new port of the new rank 0); nothing has to be torn down here
(tests/test_training_elastic.py kills rank 0 mid-run).

The command line is :class:`gke_ray_tpu.core.job_spec.JobSpec`'s.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Mapping

# Ray 2.60 enables Train v2 by default; older cluster images need the flag
# before ray.train is imported.
os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")

from gke_ray_tpu.core.errors import ConfigError  # noqa: E402
from gke_ray_tpu.core.job_spec import COLD_START_TIMEOUT_S, TRAINER_MODULE, JobSpec  # noqa: E402
from gke_ray_tpu.core.worker_env import UV_VERSION, installed_here, missing, packages, requirement_line  # noqa: E402

WORKER_ENV = {
    # Cache every compiled program in MaxText's jax_cache_dir: JAX skips programs that compile
    # in under a second, which is all of a small model's and a restart would compile them again.
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    # The INFO chatter of TensorFlow's C++ logging and of transformers; MaxText's own lines stay.
    "TF_CPP_MIN_LOG_LEVEL": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}
CPU_WORKER_ENV = {**WORKER_ENV, "JAX_PLATFORMS": "cpu"}

CPU_SHARED_BINARY_WAIT_S = 300
"""How long a CPU process waits for a program the lowest device's process compiles
(share_compiled_programs_across_cpu_processes): a loaded 2-core machine's slowest import
and compile with room to spare; past it the worker fails and Ray Train starts the group again,
where JAX's own default would hold it 20 minutes."""

TPU_HOST_LINE = "[trainer] TPU host:"
"""Each TPU worker's line of what Ray Train gave it (``key=value`` items follow): the slice it is on and
its multislice settings, read back by tests/test_tpu_path.py and by whoever reads a job's log."""
_SLICE_ENV = ("TPU_NAME", "TPU_WORKER_ID")
_MULTISLICE_ENV = ("MEGASCALE_SLICE_ID", "MEGASCALE_NUM_SLICES", "MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_PORT")
SLICE_WAIT_S = 2 * COLD_START_TIMEOUT_S
"""How long a run waits, in all, for workers Ray Train cannot place before it fails: two of GKE's
15-minute scale-up attempts (a cold start asks again once). Ray Train retries a worker group whose
start timed out without limit (``FailureConfig.controller_failure_limit=-1``), so a slice that never
comes would otherwise leave the job RUNNING for ever (tests/test_tpu_path.py)."""


def train_loop_per_worker(config: dict) -> None:
    """Runs on every Ray Train worker: MaxText's ``train.main(argv)``."""
    from absl import logging as absl_logging

    # MaxText logs progress ("completed step: ...") through absl at INFO; without
    # app.run() absl stays at WARNING and the job log would show no steps.
    absl_logging.set_verbosity(absl_logging.INFO)
    absl_logging.use_absl_handler()
    if config["backend"] == "cpu":
        _initialize_jax_on_cpu()
    else:
        _report_tpu_host(config["hosts_per_slice"])
    if os.environ.get("JAX_PLATFORMS") == "cpu":
        # Also a TPU job's workers told to run JAX on CPU (tests/fake_tpu_job).
        share_compiled_programs_across_cpu_processes()
    from maxtext.trainers.pre_train.train import main as maxtext_main

    maxtext_main(config["argv"])


def _report_tpu_host(hosts_per_slice: int) -> None:
    """Print what Ray Train gave this worker, after settling a 1-slice group's multislice settings.

    Ray Train sets MEGASCALE_NUM_SLICES, _SLICE_ID and _COORDINATOR_ADDRESS for groups of 2 slices or
    more only. A group of one (an elastic run down to one slice) keeps the pod's, and the stack's pods
    say numSlices: libtpu would wait for slices this group does not have. Seen on the fake-TPU cluster
    (tests/test_tpu_path.py). libtpu reads them when JAX creates its TPU backend, on MaxText's first
    call, after this (Ray's jax.distributed.initialize does not create it); not seen on a TPU.
    """
    import ray.train

    context = ray.train.get_context()
    if context.get_world_size() <= hosts_per_slice:
        os.environ["MEGASCALE_NUM_SLICES"] = "1"
        for key in ("MEGASCALE_SLICE_ID", "MEGASCALE_COORDINATOR_ADDRESS"):
            os.environ.pop(key, None)
    items = {"rank": context.get_world_rank(), "world": context.get_world_size(),
             **{key: os.environ.get(key, "") for key in (*_SLICE_ENV, *_MULTISLICE_ENV)}}
    print(TPU_HOST_LINE, " ".join(f"{key}={value}" for key, value in items.items()), flush=True)


def _initialize_jax_on_cpu() -> None:
    """One JAX program over all CPU workers (rank 0 hosts the coordinator)."""
    import socket

    import jax
    import ray
    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    context = ray.train.get_context()
    world_size, rank = context.get_world_size(), context.get_world_rank()
    if world_size == 1:
        return
    address = None
    if rank == 0:
        ip = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((ip, 0))
            address = f"{ip}:{s.getsockname()[1]}"
    address = broadcast_from_rank_zero(address)
    jax.distributed.initialize(address, num_processes=world_size, process_id=rank)


def share_compiled_programs_across_cpu_processes() -> None:
    """Let the processes of a multi-process JAX run on CPU compile each program once.

    On CPU, JAX's persistent-cache key includes a topology fingerprint that
    differs per process (on TPU it is the slice's, the same on every host),
    and only process 0 writes the cache: every other rank missed it on every
    restart and compiled again. Hash the global devices instead (the same on
    every rank, different for another device count), and let the lowest
    device's process compile what the cache lacks and hand the binary to the
    others (``jax_share_binary_between_hosts``) within a bounded wait, instead
    of every rank compiling it at once. This replaces a private function of
    the pinned jax (0.12.0.1); without it the run only compiles more.
    """
    import jax
    from jax._src import cache_key

    if not hasattr(cache_key, "_hash_accelerator_config"):
        return

    def global_devices(hash_obj, accelerators) -> None:
        for device in accelerators.flat:
            cache_key._hash_string(hash_obj, f"{device.device_kind}:{device.id}:{device.process_index}")

    cache_key._hash_accelerator_config = global_devices
    jax.config.update("jax_share_binary_between_hosts", True)
    jax.config.update("jax_share_binary_between_hosts_timeout_ms", CPU_SHARED_BINARY_WAIT_S * 1000)


def resolve_config(path: str) -> str:
    """The tutorial's "absolute path for the config": a file in the working
    directory becomes absolute (the workers' cwd differs from the driver's);
    anything else is left for MaxText to find in its installed package."""
    return os.path.abspath(path) if os.path.isfile(path) else path


def worker_argv(spec: JobSpec) -> list[str]:
    """MaxText's argv on the workers (argv[0] is a program name, as under absl)."""
    config, *items = spec.maxtext_argv
    if spec.backend == "cpu":
        # The runtime is set up by _initialize_jax_on_cpu; MaxText's own CPU path
        # expects the environment of an xpk CPU workload (JOB_INDEX, ...).
        items.append("skip_jax_distributed_system=true")
    return [TRAINER_MODULE, resolve_config(config), *items]


def scaling_config(spec: JobSpec):
    from ray.train.v2.api.config import ScalingConfig

    low, high = spec.worker_range()
    num_workers = (low, high) if spec.elastic else high
    if spec.backend == "cpu":
        return ScalingConfig(num_workers=num_workers, use_tpu=False, resources_per_worker={"CPU": 1})
    shape = spec.shape()
    return ScalingConfig(
        use_tpu=True,
        num_workers=num_workers,
        topology=shape.topology,
        accelerator_type=shape.generation.ray_accelerator_type,
        resources_per_worker={"TPU": shape.chips_per_host},
        placement_strategy="SPREAD",
    )


def start_retries() -> int:
    """Worker-group start timeouts Ray Train may retry: as many as fit in SLICE_WAIT_S after the first.

    Ray counts them over the whole run and never resets the count, so each recovery that waited out a
    start timeout (after a lost host, Ray still counts it for a while) uses one up.
    """
    from ray.train.v2._internal.constants import (
        DEFAULT_WORKER_GROUP_START_TIMEOUT_S, WORKER_GROUP_START_TIMEOUT_S_ENV_VAR,
    )

    wait = float(os.environ.get(WORKER_GROUP_START_TIMEOUT_S_ENV_VAR, DEFAULT_WORKER_GROUP_START_TIMEOUT_S))
    return max(0, math.ceil(SLICE_WAIT_S / wait) - 1)


def tpu_worker_env(installed: Mapping[str, str]) -> dict:
    """The TPU workers' runtime env on a head whose Python has ``installed`` ({name: version}).

    The head runs the workers' image, so what it lacks of the lock (``core/worker_env``) the
    workers lack too: nothing on the stack's image, which has the whole lock; on Ray's own image, the
    packages Ray did not bring at the locked versions. Those Ray's uv installs on each worker, every wheel
    checked against the lock's sha256, none but the listed ones (the lock is complete).
    """
    lacking = missing(packages(), installed)
    if not lacking:
        return {"env_vars": WORKER_ENV}
    return {
        "uv": {
            "packages": [requirement_line(package) for package in lacking],
            "uv_version": f"=={UV_VERSION}",
            "uv_pip_install_options": ["--no-deps", "--require-hashes", "--only-binary", ":all:", "--no-cache"],
        },
        "env_vars": WORKER_ENV,
    }


def run_config(spec: JobSpec):
    from ray.train.v2.api.config import FailureConfig, RunConfig

    worker_env = {"env_vars": CPU_WORKER_ENV} if spec.backend == "cpu" else tpu_worker_env(installed_here())
    return RunConfig(
        name=spec.run_name,
        storage_path=spec.storage_path,
        failure_config=FailureConfig(max_failures=spec.failures_allowed, controller_failure_limit=start_retries()),
        worker_runtime_env=worker_env,
    )


def build_trainer(spec: JobSpec):
    from ray.train.v2.jax import JaxTrainer

    return JaxTrainer(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config={"argv": worker_argv(spec), "backend": spec.backend,
                           "hosts_per_slice": spec.shape().hosts if spec.backend == "tpu" else 1},
        scaling_config=scaling_config(spec),
        run_config=run_config(spec),
    )


def main(argv: list[str] | None = None) -> int:
    spec = JobSpec.from_argv(sys.argv[1:] if argv is None else argv)
    try:
        spec.validate()
    except ConfigError as e:
        print(f"python -m gke_ray_tpu.training.worker.trainer: error: {e}", file=sys.stderr)
        return 2
    low, high = spec.worker_range()
    print(
        f"training {spec.run_name}: {spec.backend} backend, "
        f"{f'{low}..{high}' if spec.elastic else high} workers, "
        f"max_failures={spec.failures_allowed}",
        flush=True,
    )
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError
    from ray.train.v2.api.exceptions import ControllerError

    try:
        build_trainer(spec).fit()
    except ControllerError as e:
        if not isinstance(e.controller_failure, WorkerGroupStartupTimeoutError):
            raise
        where = f"{spec.shape().pod_type} slices" if spec.backend == "tpu" else "CPU workers"
        print(
            f"training {spec.run_name}: error: Ray Train could not place {e.controller_failure.num_workers} "
            f"workers ({where}) in {SLICE_WAIT_S:.0f} s ({start_retries() + 1} waits): the capacity did not "
            f"come (check the TPU node pools and the autoscaler). Ray Train: {e.controller_failure}",
            file=sys.stderr, flush=True,
        )
        return 1
    print(f"training {spec.run_name}: complete", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
