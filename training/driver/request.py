"""The submit command's command line, parsed once into a typed request."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from gke_ray_tpu.core.job_spec import DEFAULT_CONFIG, parse_overrides
from gke_ray_tpu.core.maxtext import Value
from gke_ray_tpu.core import REPO_ROOT
from gke_ray_tpu.core.presets import DEFAULT_PRESET, PRESETS
from gke_ray_tpu.core.kueue_waiting import QUEUED_DEADLINE_MARGIN_S
from gke_ray_tpu.core.ray_job import DEFAULT_PRE_RUNNING_DEADLINE_SECONDS

DEFAULT_LOCAL_DIR = REPO_ROOT / "local-runs"
"""This machine's run directories: ``<dir>/<run_name>/`` holds the job's log and record and the report's figure
(and, for a local run, MaxText's checkpoints and metrics); ``gke_ray_tpu.training.driver.run_files``."""


@dataclass(frozen=True)
class SubmitRequest:
    """What the user asked ``python -m gke_ray_tpu.training.submit`` for."""

    local: bool = False
    """Run on local CPU workers (a throwaway Ray head unless ``address``)."""
    outputs_file: Optional[str] = None
    """``pulumi stack output --json`` saved to a file (``-``: stdin)."""
    stack: Optional[str] = None
    """A stack whose outputs the Automation API reads."""
    preset: Optional[str] = None
    config: str = DEFAULT_CONFIG
    elastic: bool = False
    slices: Optional[int] = None
    min_slices: Optional[int] = None
    max_failures: Optional[int] = None
    address: Optional[str] = None
    kube_context: Optional[str] = None
    output_dir: Path = DEFAULT_LOCAL_DIR
    """Where this machine keeps the run's files (see DEFAULT_LOCAL_DIR)."""
    verbose: bool = False
    """Stream the job's whole log, not only progress."""
    follow: Optional[str] = None
    """Attach to this run (a declared one, or a submitted one) instead of submitting."""
    dashboard: bool = False
    """Only forward a local port to the RayCluster's Ray dashboard, until Ctrl-C (with ``follow``: that run's)."""
    backoff_limit: int = 0
    """A stack with a cluster per run: KubeRay retries a failed run this many times, each on a new cluster."""
    pre_running_deadline_seconds: Optional[int] = None
    """A stack with a cluster per run: how long the run may wait for its cluster before KubeRay ends it, per attempt
    (unset: ``gke_ray_tpu.training.driver.submission.pre_running_deadline``)."""
    overrides: dict[str, Value] = field(default_factory=dict)

    @property
    def wants_elastic(self) -> bool:
        return self.elastic or self.min_slices is not None

    @classmethod
    def from_argv(cls, argv: Optional[Sequence[str]] = None) -> "SubmitRequest":
        """Parse the command line; a bad flag exits with status 2 and one line, a bad override is a ConfigError."""
        parser = _parser()
        args = parser.parse_args(argv)
        if not (args.local or args.outputs_file or args.stack):
            parser.error("one of --outputs-file, --stack or --local is required")
        if args.follow and args.overrides:
            parser.error("--follow attaches to a run as it is: no key=value overrides")
        if args.dashboard and (args.local or args.address or args.overrides):
            parser.error("--dashboard opens the stack's Ray dashboard only: with --outputs-file or --stack "
                         "(and --follow RUN for a run's own cluster), no --local, --address or key=value overrides")
        overrides = parse_overrides(args.overrides)
        if args.follow:
            overrides["run_name"] = args.follow
        return cls(
            local=args.local,
            outputs_file=args.outputs_file,
            stack=args.stack,
            preset=args.preset,
            config=args.config,
            elastic=args.elastic,
            slices=args.slices,
            min_slices=args.min_slices,
            max_failures=args.max_failures,
            address=args.address,
            kube_context=args.kube_context,
            output_dir=Path(args.output_dir),
            verbose=args.verbose,
            follow=args.follow,
            dashboard=args.dashboard,
            backoff_limit=args.backoff_limit,
            pre_running_deadline_seconds=args.pre_running_deadline_seconds,
            overrides=overrides,
        )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """One line, like the command's other errors (argparse would print the usage first)."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m gke_ray_tpu.training.submit",
        description="Submit the MaxText JaxTrainer job to the stack's RayCluster (or run it locally on CPU).",
        epilog="Exit status: 0 succeeded, 1 failed/stopped, 2 bad arguments, 3 cluster unreachable, 130 interrupted.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--outputs-file", metavar="FILE",
                       help="`pulumi stack output --json` saved to FILE (- reads stdin)")
    where.add_argument("--stack", help="read the outputs of this stack with the Pulumi Automation API")
    where.add_argument("--local", action="store_true",
                       help="run on local CPU workers (starts a Ray head on 127.0.0.1 unless --address)")
    p.add_argument("--preset", help=f"one of {', '.join(PRESETS)} (default {DEFAULT_PRESET}, or tiny-cpu with --local)")
    p.add_argument("--config", default=DEFAULT_CONFIG,
                   help=f"MaxText YAML (default {DEFAULT_CONFIG}: the installed MaxText's base config)")
    p.add_argument("--elastic", action="store_true",
                   help="elastic run between the stack's elasticMinSlices and numSlices (--local: 1 and --slices)")
    p.add_argument("--slices", type=int, help="slices to train on (--local: CPU workers, default 2)")
    p.add_argument("--min-slices", type=int, help="elastic lower bound (implies --elastic)")
    p.add_argument("--max-failures", type=int, help="worker-group restarts (default 3 elastic or on a Spot stack, else 0)")
    p.add_argument("--address", help="Ray dashboard URL to use as is (no port-forward, no local head)")
    p.add_argument("--kube-context", help="kubeconfig context to use (default: the current one, which must be the "
                                          "stack's cluster, gke_<project>_<clusterLocation>_<clusterName>)")
    p.add_argument("--output-dir", default=str(DEFAULT_LOCAL_DIR),
                   help="this machine's run directories: <dir>/<run_name>/ gets the job log and the report's figure, "
                        "and with --local MaxText's checkpoints (default local-runs/)")
    p.add_argument("--follow", metavar="RUN",
                   help="attach to run RUN (declared in the stack's runs, or submitted before): progress and exit status")
    p.add_argument("--dashboard", action="store_true",
                   help="forward a local port to the RayCluster's Ray dashboard, print its URL and keep the forward "
                        "open until Ctrl-C (submits nothing); on a stack with a cluster per run, the running run's "
                        "(--follow RUN picks one)")
    p.add_argument("--backoff-limit", type=int, default=0,
                   help="a stack that scales to zero: retries of a failed run, each on a new cluster (default 0)")
    p.add_argument("--pre-running-deadline-seconds", type=int,
                   help="a stack that scales to zero: seconds a run may wait for its cluster (TPU slices, Ray head) "
                        "before KubeRay ends it, per attempt; in the stack's queue, above Kueue's PodsReady timeout "
                        f"(default: that timeout + {QUEUED_DEADLINE_MARGIN_S}; without a queue "
                        f"{DEFAULT_PRE_RUNNING_DEADLINE_SECONDS})")
    p.add_argument("--verbose", action="store_true", help="stream the job's whole log, not only progress")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="MaxText overrides, e.g. steps=20 (run_name=NAME follows or resumes that run)")
    return p
