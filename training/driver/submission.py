"""The job a submit request becomes: the trainer's spec, entry point, runtime env, and where its files go."""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gke_ray_tpu.core import code_archive
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import (
    COMPILATION_CACHE_DIR, JobSpec, build_job, entrypoint, run_location, runtime_env,
)
from gke_ray_tpu.core.presets import DEFAULT_PRESET, get_preset
from gke_ray_tpu.core.slices import run_min_slices
from gke_ray_tpu.core.kueue_waiting import deadline_problems, queued_pre_running_deadline
from gke_ray_tpu.core.ray_job import (
    DEFAULT_PRE_RUNNING_DEADLINE_SECONDS, PRE_RUNNING_DEADLINE_SECONDS, JobCommand, archived_command, check_backoff_limit,
)
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.training.driver.stack_outputs import StackOutputs

LOCAL_WORKERS = 2
"""Two CPU workers: the smallest run that is still multi-process SPMD (and fits 2 cores)."""


def shipped() -> list[str]:
    """What Ray uploads for the job: the packages a job imports (``SHIPPED_PACKAGES``), the files a declared run's
    archive holds, staged as one folder (:func:`gke_ray_tpu.core.code_archive.staged_package`); not the repository."""
    return [str(code_archive.staged_package(code_archive.package_files()))]


@dataclass(frozen=True)
class Submission:
    spec: JobSpec
    entrypoint: str
    runtime_env: dict
    checkpoints: str
    """Where MaxText writes the checkpoints, as the user can find them."""
    run_dir: Path
    """This machine's directory for the run: its job log (and, locally, checkpoints and metrics)."""
    code_files: Optional[dict[str, Path]] = None
    """A run that brings its own cluster: the code archive's files (the job imports the archive in the bucket)."""
    pre_running_deadline_seconds: Optional[int] = None
    """A run that brings its own cluster: its RayJob's ``preRunningDeadlineSeconds`` (:func:`pre_running_deadline`)."""

    def command(self, submission_id: str) -> JobCommand:
        """What KubeRay submits for a run that brings its own cluster, as Ray job ``submission_id``."""
        return JobCommand(self.entrypoint, self.runtime_env, submission_id)


def unique_run_name(base: str) -> str:
    return f"{base}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def _run_dirs(request: SubmitRequest) -> Path:
    out_dir = request.output_dir.resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError("--output-dir", str(request.output_dir), "a directory (this is a file)")
    return out_dir


def _run_name(request: SubmitRequest, base: str) -> str:
    name = request.overrides.get("run_name")
    return str(name) if name is not None else unique_run_name(base)


def for_cluster(request: SubmitRequest, outputs: StackOutputs) -> Submission:
    preset = get_preset(request.preset or DEFAULT_PRESET)
    if preset.backend != "tpu":
        raise ConfigError("--preset", preset.name, "a TPU preset for a cluster run (tiny-cpu is for --local)")
    out_dir = _run_dirs(request)
    slices = outputs.num_slices if request.slices is None else request.slices
    if slices > outputs.num_slices:
        raise ConfigError("--slices", slices, f"at most the stack's numSlices ({outputs.num_slices})")
    spec = build_job(
        preset,
        base_output_directory=outputs.checkpoint_dir.rstrip("/") + "/",
        run_name=_run_name(request, preset.run_name),
        slices=slices,
        overrides=request.overrides,
        config=request.config,
        elastic=request.wants_elastic,
        min_slices=run_min_slices(request.min_slices, outputs.elastic_min_slices, outputs.num_slices, "--min-slices"),
        generation=outputs.tpu_generation,
        topology=outputs.topology,
        max_failures=request.max_failures,
        spot=outputs.capacity_mode.spot,
        compilation_cache_dir=COMPILATION_CACHE_DIR,
    )
    check_backoff_limit(request.backoff_limit, outputs.scale_to_zero, "--backoff-limit")
    code_files, deadline = None, None
    if outputs.scale_to_zero:
        # KubeRay posts the job (HTTPMode): no files of this machine's reach the cluster, the archive does.
        deadline = pre_running_deadline(request, outputs)
        code_files = code_archive.package_files()
        # The job checks the archive against this checkout's code before importing anything of it.
        archived = archived_command(spec, code_archive.sha256(code_files), cold_start=True)
        command, env = archived.entrypoint, dict(archived.runtime_env)
    else:
        env = runtime_env(py_modules=shipped())
        command = entrypoint(spec)
    return Submission(
        spec=spec,
        entrypoint=command,
        runtime_env=env,
        checkpoints=run_location(spec, "checkpoints", outputs.bucket_name),
        run_dir=out_dir / spec.run_name,
        code_files=code_files,
        pre_running_deadline_seconds=deadline,
    )


def pre_running_deadline(request: SubmitRequest, outputs: StackOutputs) -> int:
    """The run's ``preRunningDeadlineSeconds``: ``--pre-running-deadline-seconds``, else the default, which in the
    stack's queue lies past Kueue's PodsReady timeout. KubeRay counts it per attempt and retries a run that
    reaches it (``gke_ray_tpu.core.ray_job.DEFAULT_PRE_RUNNING_DEADLINE_SECONDS``); in a queue a deadline within
    Kueue's timeout would cut Kueue's requeue short, so it is refused (``gke_ray_tpu.core.kueue_waiting.deadline_problems``)."""
    key = "--pre-running-deadline-seconds"
    wait = outputs.queue_wait
    if request.pre_running_deadline_seconds is None:
        return (DEFAULT_PRE_RUNNING_DEADLINE_SECONDS if wait is None
                else queued_pre_running_deadline(outputs.pods_ready_timeout_s))
    deadline = PRE_RUNNING_DEADLINE_SECONDS.check(request.pre_running_deadline_seconds, key)
    problems = deadline_problems(deadline, request.backoff_limit, wait) if wait is not None else []
    if problems:
        raise ConfigError(key, deadline, f"more than Kueue's {wait.timeout_s} s PodsReady timeout, so that Kueue "
                                         f"requeues a run whose slices do not all come: {problems[0]}")
    return deadline


def _on_cpu(env: dict) -> dict:
    """Every process of a local job (driver, Ray Train controller, workers) keeps JAX on the CPU: with
    libtpu installed (the compile check's compiler) JAX would otherwise try a TPU backend first."""
    env["env_vars"]["JAX_PLATFORMS"] = "cpu"
    return env


def for_local(request: SubmitRequest) -> Submission:
    preset = get_preset(request.preset or "tiny-cpu")
    if preset.backend != "cpu":
        raise ConfigError("--preset", preset.name, "a CPU preset for --local (tiny-cpu)")
    for module in ("maxtext", "jax"):
        # The workers run this interpreter: fail here rather than in their logs.
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                "--local", f"no {module} in {sys.executable}",
                "the packages of requirements.txt installed (MaxText needs Python >= 3.12)",
            )
    out_dir = _run_dirs(request)
    slices = LOCAL_WORKERS if request.slices is None else request.slices
    cpus = os.cpu_count() or 1
    if slices > cpus:
        raise ConfigError("--slices", slices, f"at most {cpus} for --local (one worker per CPU of this machine)")
    spec = build_job(
        preset,
        base_output_directory=str(out_dir),
        run_name=_run_name(request, preset.run_name),
        slices=slices,
        overrides=request.overrides,
        config=request.config,
        elastic=request.wants_elastic,
        min_slices=request.min_slices,
        max_failures=request.max_failures,
        storage_path=str(out_dir / "ray-train"),
        compilation_cache_dir=str(out_dir / "jax-cache"),
    )
    return Submission(
        spec=spec,
        # The driver runs on this machine: this interpreter, not whatever `python` is on PATH.
        entrypoint=entrypoint(spec, python=shlex.quote(sys.executable)),
        runtime_env=_on_cpu(runtime_env(py_modules=shipped())),
        checkpoints=run_location(spec, "checkpoints"),
        run_dir=out_dir / spec.run_name,
    )
