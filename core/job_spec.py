"""One training job: the trainer's command line, its submission id and runtime env, built in one place.

``python -m gke_ray_tpu.training.worker.trainer [trainer flags] <maxtext.yml> key=value ...``
is the job's entry point on the Ray head. The MaxText part follows the
tutorial's ``maxtext_multi_slice_trainer.py base.yml key=value ...``
convention; the flags in front say where it runs (TPU slices or local CPU
workers) and whether it is elastic.

:func:`build_job` turns a preset, overrides and the slices into a
:class:`JobSpec` (applying the defaults a restartable run needs); the submit
command and the stack's declared runs (``gke_ray_tpu.components.maxtext_run``) both call it,
and both render the job with :func:`entrypoint`, :func:`runtime_env` and
:func:`submission_id_for`, so a declared run and a submitted one are the same
job. The trainer parses the same argv with :meth:`JobSpec.from_argv` and
validates again, so a job submitted by hand with ``ray job submit`` gets the
same checks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from gke_ray_tpu.core import parallelism
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.maxtext import Value, check_settings, parse_value, render
from gke_ray_tpu.core.presets import Backend, Preset
from gke_ray_tpu.core.slices import MIN_SLICES
from gke_ray_tpu.core.tpu_catalogue import SliceShape, slice_shape

DEFAULT_CONFIG = "src/maxtext/configs/base.yml"
"""MaxText's own spelling of its base config: a file of that path in the job's
working directory (a MaxText checkout) wins, otherwise MaxText resolves it in
the installed package (``pyconfig.resolve_config_path``). Nothing is downloaded."""

ELASTIC_MAX_FAILURES = 3
"""The tutorial's ``FailureConfig(max_failures=3)`` for elastic runs (and, here, runs on Spot slices)."""

RESTART_CHECKPOINT_PERIOD = 25
"""Steps between checkpoints of a run that may restart, unless it says otherwise.

MaxText's base.yml says 10000, so a 100-step run checkpoints only at step 0 and
at the end, and a restart redoes everything. Every 25 steps bounds the loss to
25 steps (~50 s of the 8B run at the estimated ~2 s/step) while a ~90 GiB 8B
checkpoint (float32 weights + Adam state) has time to reach the bucket before
the next one starts."""

DATA_MOUNT = "/data"
"""Where every Ray pod sees the checkpoint bucket through GCS FUSE: for what needs a file system (a
declared run's code archive on PYTHONPATH, the compilation cache), never for checkpoints.

Orbax treats a local path as atomic-rename storage: it saves into a temporary directory, renames it,
and takes any directory without the temporary suffix as complete. On a bucket, GCS FUSE implements that
rename as a copy and delete of every object (twice per save: the item and the step directory), and a
host lost during the copy leaves a torn step directory a restore would take as complete. On a
``gs://`` path Orbax writes in place and a step counts only once its ``commit_success.txt`` exists
(``orbax.checkpoint._src.path.atomicity_defaults``), so cluster runs write to :func:`bucket_url`."""

COMPILATION_CACHE_DIR = f"{DATA_MOUNT}/jax-cache"
"""MaxText's ``jax_cache_dir`` on the cluster: in the bucket, so every host and every restart finds what
host 0 compiled. JAX writes each entry once under a new name (no rename), which GCS FUSE uploads whole
on close, and the mount's file cache serves the restarts' reads."""


def bucket_url(bucket: str) -> str:
    """The base a cluster run writes its checkpoints and metrics to: the bucket itself, as Orbax's ``gs://``."""
    return f"gs://{bucket}"


TRAINER_MODULE = "gke_ray_tpu.training.worker.trainer"
SHIPPED_PACKAGES = ("gke_ray_tpu.core", "gke_ray_tpu.training")
"""The packages the job's driver and workers import from this repository: all Ray ships."""
TRAINER_PROG = f"python -m {TRAINER_MODULE}"


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_ATTEMPT_SUFFIX = re.compile(r"-attempt-\d+$")


def parse_overrides(items: Sequence[str]) -> dict[str, Value]:
    """``["steps=5", ...]`` -> ``{"steps": 5}``, typed as MaxText types them; a malformed item is a ConfigError."""
    out: dict[str, Value] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _KEY.fullmatch(key):
            raise ConfigError("override", item, "MaxText key=value, e.g. steps=20")
        out[key] = parse_value(value)
    return out


def submission_id_for(run_name: str, attempt: int = 1) -> str:
    """``maxtext-<run>`` for the first job of a run, ``maxtext-<run>-attempt-<N>`` after it."""
    return f"maxtext-{run_name}" if attempt == 1 else f"maxtext-{run_name}-attempt-{attempt}"


def declared_submission_id(run_name: str, command: str, env: Mapping) -> str:
    """The Ray job id of a run declared in the stack: ``maxtext-<run>-rayjob-<digest of what it runs>``.

    KubeRay submits a RayJob's id once per cluster and ignores later spec
    changes, so a changed run must be a new job: the digest changes with the
    command and the runtime env, the run_name does not, and MaxText resumes the
    run from its checkpoints.
    """
    text = json.dumps({"entrypoint": command, "runtime_env": env}, sort_keys=True)
    return f"maxtext-{run_name}-rayjob-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class JobSpec:
    backend: Backend
    maxtext: Mapping[str, Value]
    """MaxText settings in argv order: base_output_directory first, run_name last."""
    slices: int
    """TPU slices (CPU backend: worker processes, one CPU device each)."""
    config: str = DEFAULT_CONFIG
    """The MaxText YAML the settings apply to."""
    min_slices: Optional[int] = None
    """Set for an elastic run: Ray Train keeps between min_slices and slices."""
    generation: Optional[str] = None
    topology: Optional[str] = None
    max_failures: Optional[int] = None
    """None: the tutorial's default, 3 when elastic and 0 otherwise."""
    storage_path: Optional[str] = None
    """Ray Train's run directory (None: Ray's default, as in the tutorial)."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """Defaults :func:`build_job` chose that the user should know about."""

    @property
    def elastic(self) -> bool:
        return self.min_slices is not None

    @property
    def run_name(self) -> str:
        return str(self.maxtext["run_name"])

    @property
    def steps(self) -> Optional[int]:
        steps = self.maxtext.get("steps")
        return steps if isinstance(steps, int) else None

    @property
    def maxtext_argv(self) -> list[str]:
        """The config path, then ``key=value`` items: what MaxText's ``train.main`` parses."""
        return [self.config, *(f"{key}={render(value)}" for key, value in self.maxtext.items())]

    @property
    def failures_allowed(self) -> int:
        if self.max_failures is not None:
            return self.max_failures
        return ELASTIC_MAX_FAILURES if self.elastic else 0

    def shape(self) -> SliceShape:
        return slice_shape(self.generation or "", self.topology or "", key="--topology", generation_key="--generation")

    def worker_range(self) -> tuple[int, int]:
        """(min, max) Ray Train workers: one per TPU host, whole slices only."""
        per_slice = self.shape().hosts if self.backend == "tpu" else 1
        low = self.min_slices if self.min_slices is not None else self.slices
        return low * per_slice, self.slices * per_slice

    def validate(self) -> None:
        """Every check that can run before slices are reserved; raises ConfigError."""
        if not self.config.endswith(".yml"):
            raise ConfigError("config", self.config, "a MaxText YAML path ending in .yml")
        for key in ("base_output_directory", "run_name"):
            if not self.maxtext.get(key):
                raise ConfigError(
                    key, self.maxtext.get(key), "set: checkpoints go to <base_output_directory>/<run_name>"
                )
        if not _RUN_NAME.fullmatch(self.run_name) or _ATTEMPT_SUFFIX.search(self.run_name):
            raise ConfigError(
                "run_name", self.run_name,
                "1-100 letters, digits, '_', '.' or '-' (a directory and a Ray job id), "
                "not ending in -attempt-<N> (the submit command's resubmissions)",
            )
        check_settings(self.maxtext)
        if self.slices < 1:
            raise ConfigError("--slices", self.slices, "at least 1")
        if self.failures_allowed < -1:
            raise ConfigError("--max-failures", self.max_failures, "-1 (retry forever) or more")
        low = self.min_slices if self.min_slices is not None else self.slices
        if self.elastic:
            MIN_SLICES.within(high=self.slices, high_name="--slices").check(low, "--min-slices")
        if self.backend == "tpu":
            shape = self.shape()
            devices = shape.chips * shape.generation.jax_devices_per_chip
            parallelism.check_elastic(self.maxtext, devices, low, self.slices, f"{shape.pod_type} slice")
            # Imported here: every process that imports this module (Ray Train's workers and helpers among them)
            # would otherwise load the whole estimates package; only validating a TPU job needs it.
            from gke_ray_tpu.core.sharding import check_sharding

            check_sharding(self.maxtext, shape, range(low, self.slices + 1), f"{shape.pod_type} slice")
        else:
            # MaxText puts all CPU devices in one slice: the workers are ICI, DCN is 1.
            for workers in range(low, self.slices + 1):
                parallelism.check_static(self.maxtext, workers, 1, f"local run of {workers} CPU workers")

    def to_argv(self) -> list[str]:
        argv = ["--backend", self.backend, "--slices", str(self.slices)]
        if self.elastic:
            argv += ["--min-slices", str(self.min_slices)]
        if self.backend == "tpu":
            argv += ["--generation", str(self.generation), "--topology", str(self.topology)]
        if self.max_failures is not None:
            argv += ["--max-failures", str(self.max_failures)]
        if self.storage_path:
            argv += ["--storage-path", self.storage_path]
        return [*argv, *self.maxtext_argv]

    @classmethod
    def from_argv(cls, argv: Sequence[str], prog: str = TRAINER_PROG) -> "JobSpec":
        """Parse the trainer's argv (argparse exits with status 2 on a bad flag)."""
        args = _parser(prog).parse_args(list(argv))
        if args.backend == "tpu" and not (args.generation and args.topology):
            _parser(prog).error("--backend tpu needs --generation and --topology")
        return cls(
            backend=args.backend,
            maxtext=parse_overrides(args.overrides),
            slices=args.slices,
            config=args.config,
            min_slices=args.min_slices,
            generation=args.generation,
            topology=args.topology,
            max_failures=args.max_failures,
            storage_path=args.storage_path,
        )

    @classmethod
    def from_entrypoint(cls, command: str) -> "JobSpec":
        """The spec of a job from its entry point (:func:`entrypoint`'s text), as the Jobs API reports it."""
        words = shlex.split(command)
        if TRAINER_MODULE not in words:
            raise ConfigError("entrypoint", command, f"a `python -m {TRAINER_MODULE} ...` job of this project")
        return cls.from_argv(words[words.index(TRAINER_MODULE) + 1:])


def run_location(spec: JobSpec, leaf: str, bucket: Optional[str] = None) -> str:
    """Where MaxText writes ``<base_output_directory>/<run_name>/<leaf>`` (``checkpoints``, ``tensorboard``),
    as a person or a machine outside the cluster finds it.

    A job submitted before cluster runs wrote to the bucket directly had ``/data/`` as its base, the
    pods' mount of ``bucket``: following it (``--follow``) still finds its files under ``gs://<bucket>``.
    """
    base = str(spec.maxtext["base_output_directory"]).rstrip("/")
    if bucket and (base == DATA_MOUNT or base.startswith(DATA_MOUNT + "/")):
        base = f"{bucket_url(bucket)}{base[len(DATA_MOUNT):]}"
    return f"{base}/{spec.run_name}/{leaf}"


def build_job(
    preset: Preset,
    *,
    base_output_directory: str,
    run_name: str,
    slices: int,
    overrides: Mapping[str, Value] | None = None,
    config: str = DEFAULT_CONFIG,
    elastic: bool = False,
    min_slices: Optional[int] = None,
    generation: Optional[str] = None,
    topology: Optional[str] = None,
    max_failures: Optional[int] = None,
    spot: bool = False,
    storage_path: Optional[str] = None,
    compilation_cache_dir: Optional[str] = None,
) -> JobSpec:
    """The job of ``preset`` with ``overrides``, validated, with the defaults a run that may restart needs.

    ``elastic`` (or the preset's) makes the run elastic between ``min_slices``
    and ``slices``. On Spot slices a static run gets ``max_failures=3`` unless
    it says otherwise; a run that may restart checkpoints every
    :data:`RESTART_CHECKPOINT_PERIOD` steps unless it says otherwise.
    ``compilation_cache_dir`` is MaxText's ``jax_cache_dir`` unless set: where
    a restarted worker group finds the programs the first one compiled.
    """
    overrides = dict(overrides or {})
    elastic = elastic or preset.elastic
    max_failures, notes = _restart_defaults(preset, overrides, elastic, max_failures, spot)
    if compilation_cache_dir and "jax_cache_dir" not in overrides:
        overrides["jax_cache_dir"] = compilation_cache_dir
    overrides.pop("run_name", None)
    maxtext = {"base_output_directory": base_output_directory, **preset.maxtext}
    maxtext.update(overrides)
    maxtext["run_name"] = run_name
    spec = JobSpec(
        backend=preset.backend,
        maxtext=maxtext,
        slices=slices,
        config=config,
        # An elastic run keeps training down to one slice unless it says otherwise.
        min_slices=(min_slices if min_slices is not None else MIN_SLICES.low) if elastic else None,
        generation=generation,
        topology=topology,
        max_failures=max_failures,
        storage_path=storage_path,
        notes=tuple(notes),
    )
    spec.validate()
    return spec


def _restart_defaults(preset: Preset, overrides: dict, elastic: bool, max_failures: Optional[int],
                      spot: bool) -> tuple[Optional[int], list[str]]:
    """The restarts a run gets (a static run on Spot slices: :data:`ELASTIC_MAX_FAILURES`) and, where it may
    restart, a checkpoint period set into ``overrides``; the notes that say so."""
    notes: list[str] = []
    if spot and max_failures is None and not elastic:
        max_failures = ELASTIC_MAX_FAILURES
        notes.append(
            f"Spot slices: max_failures={max_failures}, so a reclaimed slice restarts the job from its "
            "latest checkpoint once GKE replaces it (--max-failures 0 fails instead)"
        )
    restarts = max_failures != 0 if max_failures is not None else elastic
    if restarts and "checkpoint_period" not in overrides and "checkpoint_period" not in preset.maxtext:
        overrides["checkpoint_period"] = RESTART_CHECKPOINT_PERIOD
        notes.append(
            f"checkpoint_period={RESTART_CHECKPOINT_PERIOD}: a restart resumes from the latest checkpoint "
            "(MaxText's default is 10000, i.e. only the first and the last step)"
        )
    return max_failures, notes


def entrypoint(spec: JobSpec, python: str = "python") -> str:
    """The job's shell command on the Ray head."""
    return f"{python} -m {TRAINER_MODULE} {shlex.join(spec.to_argv())}"


RUNTIME_ENV_VARS = {
    # Ray 2.60 enables Train v2 by default; older cluster images need the flag.
    "RAY_TRAIN_V2_ENABLED": "1",
    # Ray's log dedup treats lines that differ only in numbers as repeats, so
    # it would hide all but the first and last "completed step" lines.
    "RAY_DEDUP_LOGS": "0",
    # How long Ray Train waits for a worker group's resources (a TPU slice's) before it tries
    # again, re-reading what the cluster has. After a lost node Ray still counts the node for
    # ~15-25 s, so the first restart asks for too many workers; waiting 60 s (Ray's default)
    # for them is most of a recovery. A retry is not a failure (max_failures is not used up).
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "20",
}


COLD_START_TIMEOUT_S = 900
"""How long Ray Train waits for a worker group's slices on a cluster that scales them to zero.

A slice that is not there yet is brought up by the autoscalers (KubeRay's asks
for the worker-group replica, GKE's creates the TPU VMs): minutes, and GKE's
autoscaler gives up on a scale-up after 15. In Ray 2.60's Train v2 this one
setting bounds both the slice's placement-group (TPU head) reservation and the
worker group's start; when it runs out, Ray Train retries (it is not a failure),
so a shorter value only makes the demand the autoscaler sees come and go."""

COLD_START_ENV_VARS = {
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(COLD_START_TIMEOUT_S),
    # Train v1's placement-group wait, for cluster images whose Ray still runs it.
    "TRAIN_PLACEMENT_GROUP_TIMEOUT_S": str(COLD_START_TIMEOUT_S),
}
"""Set instead of the 20 s recovery tuning of RUNTIME_ENV_VARS on clusters that scale slices to zero."""


def runtime_env(
    *, py_modules: Sequence[str] = (), pythonpath: Optional[str] = None, cold_start: bool = False
) -> dict:
    """The job's runtime env: the code it imports, and the environment every process of the job gets.

    ``py_modules``: local package directories the submitting client uploads
    (the submit command). ``pythonpath``: a directory or zip every Ray pod
    already sees (a declared run's code archive in the bucket mounted at
    ``/data``), for a submitter that has no files of its own. ``cold_start``:
    the cluster may have no worker nodes when the job starts (it scales to
    zero), so Ray Train waits :data:`COLD_START_TIMEOUT_S` for them.
    """
    env: dict = {"env_vars": {**RUNTIME_ENV_VARS, **(COLD_START_ENV_VARS if cold_start else {})}}
    if py_modules:
        env["py_modules"] = list(py_modules)
        env["excludes"] = ["**/__pycache__"]
    if pythonpath:
        env["env_vars"]["PYTHONPATH"] = pythonpath
    return env


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run MaxText's pre-training loop on every worker of a Ray Train JaxTrainer.",
    )
    p.add_argument("--backend", choices=("tpu", "cpu"), default="tpu",
                   help="tpu: one worker per TPU host; cpu: local CPU workers, JAX on CPU")
    p.add_argument("--slices", type=int, required=True,
                   help="TPU slices (cpu: worker processes); the maximum when elastic")
    p.add_argument("--min-slices", type=int,
                   help="elastic: keep training with as few as this many slices")
    p.add_argument("--generation", help="TPU generation, e.g. v6e")
    p.add_argument("--topology", help="slice topology, e.g. 4x4")
    p.add_argument("--max-failures", type=int,
                   help=f"worker-group restarts allowed (default {ELASTIC_MAX_FAILURES} elastic, 0 static)")
    p.add_argument("--storage-path", help="Ray Train run directory")
    p.add_argument("config", help=f"MaxText YAML, e.g. {DEFAULT_CONFIG}")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="MaxText overrides")
    return p
