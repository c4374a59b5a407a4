"""Post-deploy step: submit the MaxText job to the stack's RayCluster, or run it locally.

    python -m training.submit --preset llama3-70b --outputs-file outputs.json
    python -m training.submit --preset llama3-8b-elastic --stack dev
    python -m training.submit --local

Both paths build the trainer's command line from a preset (plus ``key=value``
overrides), validate it, reach a Ray Jobs API (through a Kubernetes
port-forward to the head service, a local head started here, or ``--address``),
submit with a submission id derived from the run name (running the command
again follows, reports or resumes that run: ``training.jobs``), stream the
job's logs with a progress line per training step and per restart, and exit
with the job's outcome. Calls to the Jobs API are retried on transient errors.

Exit status: 0 job succeeded; 1 job failed or was stopped; 2 bad arguments or
stack outputs; 3 cluster unreachable; 130 interrupted (the job is stopped).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from components.errors import ConfigError
from training import retry, stack_outputs
from training.errors import ClusterError
from training.job import DEFAULT_CONFIG, ELASTIC_MAX_FAILURES, JobSpec, maxtext_argv, parse_overrides
from training.jobs import TERMINAL, JobsApi, decide
from training.presets import PRESETS, RESTART_CHECKPOINT_PERIOD, Preset, get_preset
from training.progress import ERROR_LINES, Progress

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOCAL_DIR = REPO_ROOT / "local-runs"
LOCAL_WORKERS = 2
"""Two CPU workers: the smallest run that is still multi-process SPMD (and fits 2 cores)."""

EXCLUDES = [".venv", ".git", "local-runs", "runs", "build", "*.egg-info", "**/__pycache__",
            ".pytest_cache", ".hypothesis"]
"""Kept out of the working directory Ray uploads (it also skips .gitignore'd files)."""

def unique_run_name(base: str) -> str:
    return f"{base}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


@dataclass(frozen=True)
class Plan:
    spec: JobSpec
    entrypoint: str
    runtime_env: dict
    checkpoints: str
    """Where MaxText writes the checkpoints, as the user can find them."""
    notes: tuple[str, ...] = ()
    """Defaults the plan chose that the user should know about."""


def _overrides(args: argparse.Namespace, preset: Preset, elastic: bool, max_failures: int | None):
    """The user's overrides, a unique run_name, and a checkpoint period if the run may restart."""
    overrides = parse_overrides(args.overrides)
    overrides.setdefault("run_name", unique_run_name(preset.run_name))
    notes = []
    restarts = max_failures != 0 if max_failures is not None else elastic
    if restarts and "checkpoint_period" not in overrides and "checkpoint_period" not in dict(preset.maxtext):
        overrides["checkpoint_period"] = RESTART_CHECKPOINT_PERIOD
        notes.append(
            f"checkpoint_period={RESTART_CHECKPOINT_PERIOD}: a restart resumes from the latest checkpoint "
            "(MaxText's default is 10000, i.e. only the first and the last step)"
        )
    return overrides, notes


def plan_cluster(args: argparse.Namespace, outputs: stack_outputs.StackOutputs) -> Plan:
    preset = get_preset(args.preset or "llama3-8b")
    if preset.backend != "tpu":
        raise ConfigError("--preset", preset.name, "a TPU preset for a cluster run (tiny-cpu is for --local)")
    elastic = preset.elastic or args.elastic or args.min_slices is not None
    max_failures, notes = args.max_failures, []
    if outputs.spot and max_failures is None and not elastic:
        max_failures = ELASTIC_MAX_FAILURES
        notes.append(
            f"Spot slices: max_failures={max_failures}, so a reclaimed slice restarts the job from its "
            "latest checkpoint once GKE replaces it (--max-failures 0 fails instead)"
        )
    overrides, period_notes = _overrides(args, preset, elastic, max_failures)
    spec = JobSpec(
        backend="tpu",
        maxtext_argv=tuple(
            maxtext_argv(preset, outputs.checkpoint_dir.rstrip("/") + "/", overrides, args.config)
        ),
        slices=outputs.num_slices if args.slices is None else args.slices,
        min_slices=(outputs.elastic_min_slices if args.min_slices is None else args.min_slices) if elastic else None,
        generation=outputs.tpu_generation,
        topology=outputs.topology,
        max_failures=max_failures,
    )
    if spec.slices > outputs.num_slices:
        raise ConfigError("--slices", spec.slices, f"at most the stack's numSlices ({outputs.num_slices})")
    spec.validate()
    bucket_path = f"gs://{outputs.bucket_name}/{spec.run_name}/checkpoints"
    return Plan(spec, _entrypoint("python", spec), _runtime_env(), bucket_path, (*notes, *period_notes))


def plan_local(args: argparse.Namespace) -> Plan:
    preset = get_preset(args.preset or "tiny-cpu")
    if preset.backend != "cpu":
        raise ConfigError("--preset", preset.name, "a CPU preset for --local (tiny-cpu)")
    for module in ("maxtext", "jax"):
        # The workers run this interpreter: fail here rather than in their logs.
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                "--local", f"no {module} in {sys.executable}",
                "the packages of requirements.txt installed (MaxText needs Python >= 3.12)",
            )
    out_dir = Path(args.output_dir).resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError("--output-dir", args.output_dir, "a directory (this is a file)")
    elastic = args.elastic or args.min_slices is not None
    overrides, notes = _overrides(args, preset, elastic, args.max_failures)
    spec = JobSpec(
        backend="cpu",
        maxtext_argv=tuple(maxtext_argv(preset, str(out_dir), overrides, args.config)),
        slices=LOCAL_WORKERS if args.slices is None else args.slices,
        min_slices=(1 if args.min_slices is None else args.min_slices) if elastic else None,
        max_failures=args.max_failures,
        storage_path=str(out_dir / "ray-train"),
    )
    cpus = os.cpu_count() or 1
    if spec.slices > cpus:
        raise ConfigError("--slices", spec.slices, f"at most {cpus} for --local (one worker per CPU of this machine)")
    spec.validate()
    # The driver runs on this machine: use this interpreter, not whatever `python` is on PATH.
    return Plan(
        spec,
        _entrypoint(shlex.quote(sys.executable), spec),
        _runtime_env(extra_excludes=_inside_repo(out_dir)),
        str(out_dir / spec.run_name / "checkpoints"),
        tuple(notes),
    )


def _entrypoint(python: str, spec: JobSpec) -> str:
    return f"{python} -m training.trainer {shlex.join(spec.to_argv())}"


def _runtime_env(extra_excludes: Sequence[str] = ()) -> dict:
    return {
        "working_dir": str(REPO_ROOT),
        "excludes": [*EXCLUDES, *extra_excludes],
        # Ray's log dedup treats lines that differ only in numbers as repeats, so
        # it would hide all but the first and last "completed step" lines.
        "env_vars": {"RAY_TRAIN_V2_ENABLED": "1", "RAY_DEDUP_LOGS": "0"},
    }


def _inside_repo(path: Path) -> list[str]:
    """Exclude an output directory inside the repo from the upload (checkpoints!)."""
    try:
        return [path.relative_to(REPO_ROOT).as_posix()]
    except ValueError:
        return []


def connect(address: str, hint: str, log):
    """A JobSubmissionClient for ``address`` (retried while unreachable), or a one-line ClusterError."""
    from ray.job_submission import JobSubmissionClient

    what = f"cannot reach the Ray Jobs API at {address}"
    try:
        return retry.call(lambda: JobSubmissionClient(address), what, log)
    except ClusterError as e:
        raise ClusterError(f"{e} ({hint})") from None
    except Exception as e:  # noqa: BLE001 - requests, aiohttp and Ray raise different types here
        raise ClusterError(f"{what}: {retry.reason(e)} ({hint})") from None


def follow(api: JobsApi, sid: str, progress: Progress, total_steps: int | None, echo: bool, log) -> str:
    """Stream the logs until the job ends (a line per step and per restart); its final status."""
    def on_text(text: str) -> None:
        if echo:
            sys.stdout.write(text)
            sys.stdout.flush()
        for news in progress.feed(text):
            log(news.describe(total_steps))

    api.follow(sid, on_text)
    for news in progress.flush():
        log(news.describe(total_steps))
    return api.wait_terminal(sid, timeout_s=60)


def stop_on_interrupt(api: JobsApi, sid: str, log) -> None:
    """Ctrl-C: stop the job if it was submitted and is still going (its id is known up front)."""
    status = api.status(sid)
    if status is None or status in TERMINAL:
        return
    log(f"interrupted: stopping {sid}")
    api.stop(sid)
    api.wait_terminal(sid, timeout_s=60)


def summary(progress: Progress) -> str:
    """``16 steps, loss 6.061 -> 3.370, 1 restart (restored checkpoint 4)``."""
    first, last = progress.first, progress.last
    text = f"{len(progress.steps)} steps"
    if first:
        text += f", loss {first.loss:.3f} -> {last.loss:.3f}"
    restarts = len(progress.groups) - 1
    restored = [str(g.restored_step) for g in progress.groups if g.restored_step is not None]
    if restarts > 0:
        text += f", {restarts} restart{'s' * (restarts > 1)}"
    if restored:
        text += f" (restored checkpoint {', '.join(restored)})"
    return text


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """One line, like the command's other errors (argparse would print the usage first)."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m training.submit",
        description="Submit the MaxText JaxTrainer job to the stack's RayCluster (or run it locally on CPU).",
        epilog="Exit status: 0 succeeded, 1 failed/stopped, 2 bad arguments, 3 cluster unreachable, 130 interrupted.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--outputs-file", metavar="FILE",
                       help="`pulumi stack output --json` saved to FILE (- reads stdin)")
    where.add_argument("--stack", help="read the outputs of this stack with the Pulumi Automation API")
    where.add_argument("--local", action="store_true",
                       help="run on local CPU workers (starts a Ray head on 127.0.0.1 unless --address)")
    p.add_argument("--preset", help=f"one of {', '.join(PRESETS)} (default llama3-8b, or tiny-cpu with --local)")
    p.add_argument("--config", default=DEFAULT_CONFIG,
                   help=f"MaxText YAML (default {DEFAULT_CONFIG}: the repo's if present, else the installed MaxText's)")
    p.add_argument("--elastic", action="store_true",
                   help="elastic run between the stack's elasticMinSlices and numSlices (--local: 1 and --slices)")
    p.add_argument("--slices", type=int, help="slices to train on (--local: CPU workers, default 2)")
    p.add_argument("--min-slices", type=int, help="elastic lower bound (implies --elastic)")
    p.add_argument("--max-failures", type=int, help="worker-group restarts (default 3 elastic or on a Spot stack, else 0)")
    p.add_argument("--address", help="Ray dashboard URL to use as is (no port-forward, no local head)")
    p.add_argument("--kube-context", help="kubeconfig context for the port-forward")
    p.add_argument("--output-dir", default=str(DEFAULT_LOCAL_DIR),
                   help="--local: base_output_directory (checkpoints under <dir>/<run_name>/checkpoints)")
    p.add_argument("--quiet", action="store_true", help="print progress lines only, not the job's log")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="MaxText overrides, e.g. steps=20 (run_name=NAME follows or resumes that run)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not (args.local or args.outputs_file or args.stack):
        parser.error("one of --outputs-file, --stack or --local is required")
    log = lambda msg: print(f"[submit] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.local:
            plan, outputs = plan_local(args), None
        else:
            outputs = (
                stack_outputs.load_file(args.outputs_file)
                if args.outputs_file
                else stack_outputs.load_stack(args.stack)
            )
            plan = plan_cluster(args, outputs)
    except ConfigError as e:
        print(f"python -m training.submit: error: {e}", file=sys.stderr)
        return 2

    run_name = plan.spec.run_name
    log(f"run_name={run_name} (pass run_name={run_name} to follow or resume this run)")
    for note in plan.notes:
        log(note)
    total = int(plan.spec.overrides["steps"]) if "steps" in plan.spec.overrides else None
    progress = Progress()
    started = time.monotonic()
    try:
        with job_client(args, outputs, plan, log) as client, JobsApi(client, log) as api:
            nxt = decide(run_name, api.run_jobs(run_name))
            if nxt.why:
                log(nxt.why)
            # The interrupt may land anywhere from the submission on, even before follow() starts.
            try:
                if nxt.action == "report":
                    progress.feed(api.logs(nxt.submission_id))
                    progress.flush()
                    log(f"{nxt.submission_id} SUCCEEDED: {summary(progress)}; checkpoints: {plan.checkpoints}")
                    return 0
                if nxt.action == "submit":
                    metadata = {"run_name": run_name, "attempt": str(nxt.attempt)}
                    if api.submit(nxt.submission_id, plan.entrypoint, plan.runtime_env, metadata):
                        log(f"submitted {nxt.submission_id}: {plan.entrypoint}")
                    else:
                        log(f"{nxt.submission_id} was submitted meanwhile; following it")
                status = follow(api, nxt.submission_id, progress, total, not args.quiet, log)
                message = api.message(nxt.submission_id) if status == "FAILED" and not progress.errors else ""
            except KeyboardInterrupt:
                stop_on_interrupt(api, nxt.submission_id, log)
                raise
    except ClusterError as e:
        print(f"python -m training.submit: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130

    sid = nxt.submission_id
    log(f"{sid} {status} after {time.monotonic() - started:.0f} s: {summary(progress)}; checkpoints: {plan.checkpoints}")
    if status == "SUCCEEDED":
        return 0
    if status == "FAILED":
        lines = list(progress.errors) or [line for line in message.splitlines() if line.strip()][-ERROR_LINES:]
        log(f"{sid} FAILED; its last error lines:")
        for line in lines or ["(none in the job's log; see `ray job logs " + sid + "`)"]:
            log(f"    {line}")
    elif status == "STOPPED":
        log(f"{sid} was STOPPED (Ctrl-C, `ray job stop` or the dashboard)")
    else:
        log(f"{sid} is still {status} though its log ended; run the same command again to follow it")
        return 1
    log(f"run the same command again to resume run {run_name} from its latest checkpoint as a new attempt")
    return 1


@contextmanager
def job_client(args: argparse.Namespace, outputs, plan: Plan, log):
    """A connected JobSubmissionClient; stops the local head or port-forward it opened."""
    if args.address:
        yield connect(args.address, "is the dashboard reachable at --address?", log)
    elif args.local:
        from training.local_ray import LocalRayHead

        log_path = Path(args.output_dir).resolve() / "ray-head.log"
        with LocalRayHead(num_cpus=plan.spec.slices, log_path=log_path) as head:
            log(f"started a local Ray head: {head.address} (stopped when this command ends)")
            yield connect(head.address, f"see {log_path}", log)
    else:
        from training.port_forward import PortForward

        with PortForward(
            outputs.namespace, outputs.ray_head_service, outputs.ray_dashboard_port, context=args.kube_context
        ) as pf:
            log(f"port-forward 127.0.0.1:{pf.local_port} -> {outputs.namespace}/{pf.pod}:{pf.pod_port}")
            try:
                client = connect(pf.url, f"port-forward to {outputs.namespace}/{outputs.ray_head_service}", log)
            except ClusterError as e:
                if pf.stream_error is None:
                    raise
                raise ClusterError(f"{e}; the port-forward stream failed: {pf.stream_error}") from None
            yield client


if __name__ == "__main__":
    sys.exit(main())
