"""One training job: the trainer's command line, built, parsed and validated in one place.

``python -m training.trainer [trainer flags] <maxtext.yml> key=value ...`` is the
entry point the submit command sends to the cluster. The MaxText part follows
the tutorial's ``maxtext_multi_slice_trainer.py base.yml key=value ...``
convention; the flags in front say where it runs (TPU slices or local CPU
workers) and whether it is elastic. The submit command builds a ``JobSpec``,
validates it and renders it with ``to_argv``; the trainer parses the same argv
with ``from_argv`` and validates again, so a job submitted by hand with
``ray job submit`` gets the same checks.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from components.errors import ConfigError
from components.tpu_catalogue import SliceShape, slice_shape
from training import parallelism
from training.presets import Backend, Preset

DEFAULT_CONFIG = "src/maxtext/configs/base.yml"
"""MaxText's own spelling of its base config: a file of that path in the job's
working directory (a MaxText checkout) wins, otherwise MaxText resolves it in
the installed package (``pyconfig.resolve_config_path``). Nothing is downloaded."""

DEFAULT_MAXTEXT_PACKAGE = "maxtext[tpu]==0.2.5"
"""What the TPU workers install with uv; the version the local CPU run is tested
with (the tutorial pinned 0.2.1)."""

ELASTIC_MAX_FAILURES = 3
"""The tutorial's ``FailureConfig(max_failures=3)`` for elastic runs."""

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_ATTEMPT_SUFFIX = re.compile(r"-attempt-\d+$")
POSITIVE_INT_KEYS = ("steps", "checkpoint_period")
"""MaxText keys the submit command reads or reasons about (total steps, steps lost)."""


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """``["steps=5", ...]`` -> ``{"steps": "5"}``; a malformed item is a ConfigError."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _KEY.fullmatch(key):
            raise ConfigError("override", item, "MaxText key=value, e.g. steps=20")
        out[key] = value
    return out


def maxtext_argv(
    preset: Preset,
    base_output_directory: str,
    overrides: Mapping[str, str] | None = None,
    config: str = DEFAULT_CONFIG,
) -> list[str]:
    """The preset's MaxText argv, in the tutorial's order, with overrides applied.

    An override of a preset key replaces it in place; a new key goes before
    ``run_name``, which stays last.
    """
    overrides = overrides or {}
    keys = {"base_output_directory": base_output_directory, **dict(preset.maxtext)}
    keys.update({k: v for k, v in overrides.items() if k != "run_name"})
    keys["run_name"] = overrides.get("run_name", preset.run_name)
    return [config, *(f"{k}={v}" for k, v in keys.items())]


@dataclass(frozen=True)
class JobSpec:
    backend: Backend
    maxtext_argv: tuple[str, ...]
    """MaxText config path, then key=value items."""
    slices: int
    """TPU slices (CPU backend: worker processes, one CPU device each)."""
    min_slices: int | None = None
    """Set for an elastic run: Ray Train keeps between min_slices and slices."""
    generation: str | None = None
    topology: str | None = None
    max_failures: int | None = None
    """None: the tutorial's default, 3 when elastic and 0 otherwise."""
    maxtext_package: str = DEFAULT_MAXTEXT_PACKAGE
    storage_path: str | None = None
    """Ray Train's run directory (None: Ray's default, as in the tutorial)."""

    @property
    def elastic(self) -> bool:
        return self.min_slices is not None

    @property
    def overrides(self) -> dict[str, str]:
        return parse_overrides(self.maxtext_argv[1:])

    @property
    def run_name(self) -> str:
        return self.overrides["run_name"]

    @property
    def failures_allowed(self) -> int:
        if self.max_failures is not None:
            return self.max_failures
        return ELASTIC_MAX_FAILURES if self.elastic else 0

    def shape(self) -> SliceShape:
        return slice_shape(self.generation or "", self.topology or "", key="--topology")

    def worker_range(self) -> tuple[int, int]:
        """(min, max) Ray Train workers: one per TPU host, whole slices only."""
        per_slice = self.shape().hosts if self.backend == "tpu" else 1
        low = self.min_slices if self.elastic else self.slices
        return low * per_slice, self.slices * per_slice

    def validate(self) -> None:
        """Every check that can run before slices are reserved; raises ConfigError."""
        config, overrides = self.maxtext_argv[0], self.overrides
        if not config.endswith(".yml"):
            raise ConfigError("config", config, "a MaxText YAML path ending in .yml")
        for key in ("base_output_directory", "run_name"):
            if not overrides.get(key):
                raise ConfigError(
                    key, overrides.get(key), "set: checkpoints go to <base_output_directory>/<run_name>"
                )
        run_name = overrides["run_name"]
        if not _RUN_NAME.fullmatch(run_name) or _ATTEMPT_SUFFIX.search(run_name):
            raise ConfigError(
                "run_name", run_name,
                "1-100 letters, digits, '_', '.' or '-' (a directory and a Ray job id), "
                "not ending in -attempt-<N> (the submit command's resubmissions)",
            )
        for key in POSITIVE_INT_KEYS:
            if key in overrides and not re.fullmatch(r"[1-9][0-9]*", overrides[key]):
                raise ConfigError(key, overrides[key], "an integer >= 1")
        if self.slices < 1:
            raise ConfigError("--slices", self.slices, "at least 1")
        if self.failures_allowed < -1:
            raise ConfigError("--max-failures", self.max_failures, "-1 (retry forever) or more")
        low = self.min_slices if self.elastic else self.slices
        if self.elastic and not 1 <= low <= self.slices:
            raise ConfigError(
                "--min-slices", low, f"between 1 and --slices ({self.slices}) for an elastic run"
            )
        if self.backend == "tpu":
            shape = self.shape()
            parallelism.check_elastic(
                overrides, shape.chips, low, self.slices, f"{shape.generation.name} {shape.topology} slice"
            )
        else:
            # MaxText puts all CPU devices in one slice: the workers are ICI, DCN is 1.
            for workers in range(low, self.slices + 1):
                parallelism.check_static(overrides, workers, 1, f"local run of {workers} CPU workers")

    def to_argv(self) -> list[str]:
        argv = ["--backend", self.backend, "--slices", str(self.slices)]
        if self.elastic:
            argv += ["--min-slices", str(self.min_slices)]
        if self.backend == "tpu":
            argv += ["--generation", str(self.generation), "--topology", str(self.topology)]
            if self.maxtext_package != DEFAULT_MAXTEXT_PACKAGE:
                argv += ["--maxtext-package", self.maxtext_package]
        if self.max_failures is not None:
            argv += ["--max-failures", str(self.max_failures)]
        if self.storage_path:
            argv += ["--storage-path", self.storage_path]
        return [*argv, *self.maxtext_argv]

    @classmethod
    def from_argv(cls, argv: Sequence[str], prog: str = "python -m training.trainer") -> "JobSpec":
        """Parse the trainer's argv (argparse exits with status 2 on a bad flag)."""
        args = _parser(prog).parse_args(list(argv))
        if args.backend == "tpu" and not (args.generation and args.topology):
            _parser(prog).error("--backend tpu needs --generation and --topology")
        return cls(
            backend=args.backend,
            maxtext_argv=(args.config, *args.overrides),
            slices=args.slices,
            min_slices=args.min_slices,
            generation=args.generation,
            topology=args.topology,
            max_failures=args.max_failures,
            maxtext_package=args.maxtext_package,
            storage_path=args.storage_path,
        )


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
    p.add_argument("--maxtext-package", default=DEFAULT_MAXTEXT_PACKAGE,
                   help="pip requirement the TPU workers install with uv")
    p.add_argument("--storage-path", help="Ray Train run directory")
    p.add_argument("config", help=f"MaxText YAML, e.g. {DEFAULT_CONFIG}")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="MaxText overrides")
    return p
