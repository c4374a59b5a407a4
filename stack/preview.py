"""Offline preview of a stack for PR reviews: ``python -m gke_ray_tpu.stack.preview [--stack dev]``.

Runs the real ``__main__.py`` against Pulumi's mock engine (no CLI, no cloud,
no credentials) and prints what ``pulumi up`` would create, the roles its
identity needs for that (:mod:`gke_ray_tpu.stack.permissions`), the Kubernetes
manifests it would apply, whether the planned MaxText run's sharding maps onto
the slices, its estimated HBM per chip, and its cost. The versions GKE offers
and an existing cluster's settings are the mock engine's (``gke_ray_tpu.stack.mock_engine``),
not your project's: ``pulumi preview`` checks those against GKE.

``--compile`` also compiles the planned run's train step for the slices, at
each slice count it may train on, with XLA's TPU compiler, and whether libtpu
takes the flags the stack's TPU pods get (:mod:`gke_ray_tpu.preflight.xla_check`:
minutes on a CPU, then cached; ``--exact-flags`` compiles the run itself under
them) and prints XLA's HBM figures beside the estimate's; ``--json`` prints the
training section as one JSON object. The training section ends with what the
stack's first ``pulumi up`` starts (its slices, its declared runs) and what that
costs. Exit status (``gke_ray_tpu.core.exit_status``): 1 on a sharding mismatch
or when XLA does not compile the run within the chip's HBM at some slice count,
3 when the compile check could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from gke_ray_tpu.core import REPO_ROOT
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.exit_status import NO, OK, Unavailable, run_command
from gke_ray_tpu.core.job_spec import parse_overrides
from gke_ray_tpu.core.maxtext import check_settings
from gke_ray_tpu.preflight.report import PreflightReport, planned_run, training_json, training_section
from gke_ray_tpu.preflight.xla_check import CompileCheckError, SliceCountResults, check_job
from gke_ray_tpu.stack.checks import (
    check_cold_start, check_declared_runs, check_idle_cost, check_queue_admits, check_ray_image, check_run,
    check_waiting_cost, first_up, planned_job,
)
from gke_ray_tpu.stack.parse import parse_stack_config
from gke_ray_tpu.stack.config import config_key
from gke_ray_tpu.stack.mock_engine import OfflineRun, load_stack_file, run_offline
from gke_ray_tpu.stack.permissions import roles_section
from gke_ray_tpu.stack.plan import StackPlan, plan_stack
from gke_ray_tpu.stack.resource_tree import manifests_yaml, render_tree

PROG = "python -m gke_ray_tpu.stack.preview"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stack", default="dev", help="read Pulumi.<stack>.yaml (default: dev)")
    source.add_argument("--config-file", type=Path, help="a Pulumi.<stack>.yaml anywhere")
    parser.add_argument("--preset", help="training preset to check (default: the stack's plannedPreset, else llama3-8b)")
    parser.add_argument("--elastic", action="store_true", help="check (with --compile: compile) every slice count down to elasticMinSlices")
    parser.add_argument(
        "--section",
        choices=("all", "resources", "permissions", "manifests", "training"),
        default="all",
        help="print only one part of the preview",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="compile the planned run's train step for the slices, at each slice count it may train on, with XLA "
        "(libtpu, no TPU; minutes, then cached; a large run without the pods' flags, beside a small model on the "
        "same mesh under them) and report XLA's HBM per chip; exit 1 when it does not fit at some count",
    )
    parser.add_argument(
        "--exact-flags",
        action="store_true",
        help="with --compile: compile the run itself under the pods' flags (several times slower for a large "
        "model) rather than without them beside a small model under them",
    )
    parser.add_argument("--json", action="store_true", help="print the training section as one JSON object (with --section training)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="MaxText overrides of the preset")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    return run_command(PROG, lambda: _preview(args))


def _preview(args: argparse.Namespace) -> int:
    if args.json and args.section != "training":
        raise ConfigError("--json", True, "only with --section training (--json prints the training section: add "
                          "--section training)")
    if args.exact_flags and not args.compile:
        raise ConfigError("--exact-flags", True, "only with --compile (it says how --compile compiles: add --compile)")
    if args.compile and args.section not in ("all", "training"):
        raise ConfigError("--compile", True, f"only with --section all or training (--compile checks the planned run, "
                          f"which --section {args.section} does not show)")
    path = args.config_file or REPO_ROOT / f"Pulumi.{args.stack}.yaml"
    if not path.is_file():
        flag, value = ("--config-file", str(path)) if args.config_file else ("--stack", args.stack)
        raise ConfigError(flag, value, f"a stack whose file exists (no stack file {path})")
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    raw = load_stack_file(path)
    cfg = parse_stack_config(raw)
    plan = plan_stack(cfg)
    overrides = {**cfg.planned_overrides, **parse_overrides(args.overrides)}
    check_settings(overrides)
    maxtext, elastic = planned_run(
        args.preset or cfg.planned_preset, overrides, key="--preset" if args.preset else config_key("planned_preset"),
    )
    run = run_offline(raw, stack=stack) if args.section != "training" else None
    report = check_run(cfg, maxtext, elastic=elastic or args.elastic)
    xla = _compiled(plan, args.preset, overrides, report, args.exact_flags) if args.compile and report.ok else None
    status = OK if report.ok and (xla is None or xla.fits) else NO
    if xla is not None and not xla.fits:
        print(f"{PROG}: XLA does not compile the run within HBM {xla.refusal()}", file=sys.stderr)
    if args.json:
        print(json.dumps(training_json(stack, maxtext, report, xla), indent=2))
    else:
        print("\n\n".join(_sections(args.section, stack, plan, run, maxtext, report, xla)))
    return status


def _compiled(plan: StackPlan, preset: Optional[str], overrides: dict, report: PreflightReport,
              exact_flags: bool) -> SliceCountResults:
    """XLA's verdict on the planned run, as the pods run it, at each slice count it may train on."""
    cfg = plan.cfg
    job = planned_job(cfg, preset or cfg.planned_preset, overrides)
    try:
        return check_job(job, plan.pod_flags, report.slice_counts, cfg.shape,
                         exact_flags=exact_flags)
    except CompileCheckError as error:
        raise Unavailable(f"the compile check could not run: {error}") from None


def _sections(section: str, stack: str, plan: StackPlan, run: Optional[OfflineRun], maxtext: dict,
              report: PreflightReport, xla: Optional[SliceCountResults]) -> list[str]:
    cfg = plan.cfg
    sections = []
    if run is not None and section in ("all", "resources"):
        sections.append(render_tree(run, f"Resources of gke-ray-tpu/{stack} (pulumi up would create)"))
        sections.append("Stack outputs:\n" + json.dumps(run.outputs, indent=2))
    if run is not None and section in ("all", "permissions"):
        sections.append(roles_section(run))
    if run is not None and section in ("all", "manifests"):
        sections.append("Kubernetes manifests:\n---\n" + manifests_yaml(run))
    if section in ("all", "training"):
        sections += training_section(maxtext, report, xla)
        lines: list[str] = []
        costs = check_idle_cost(cfg, info=lines.append, warn=lambda message: lines.append(f"warning: {message}"))
        check_waiting_cost(plan, info=lines.append)
        check_ray_image(cfg, warn=lambda message: lines.append(f"warning: {message}"))
        check_cold_start(cfg, info=lines.append)
        sections.append("\n".join(lines))
        declared = check_declared_runs(plan, info=lambda _: None)
        check_queue_admits(plan)
        sections.append(first_up(cfg, costs, declared))
    return sections


if __name__ == "__main__":
    sys.exit(main())
