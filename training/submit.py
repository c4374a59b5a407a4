"""Post-deploy step: submit the MaxText job to the stack's RayCluster, or run it locally.

    python -m training.submit --preset llama3-70b --outputs-file outputs.json
    python -m training.submit --preset llama3-8b-elastic --stack dev
    python -m training.submit --local

Both paths build the trainer's command line from a preset (plus ``key=value``
overrides), validate it, reach a Ray Jobs API (through a Kubernetes
port-forward to the head service, a local head started here, or ``--address``),
submit with a submission id derived from the run name, stream the job's logs
with a progress line per training step, and exit with the job's outcome.

Exit status: 0 job succeeded; 1 job failed or was stopped; 2 bad arguments or
stack outputs; 3 cluster unreachable; 130 interrupted (the job is stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import re
import shlex
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from components.errors import ConfigError
from training import stack_outputs
from training.errors import ClusterError
from training.job import DEFAULT_CONFIG, JobSpec, maxtext_argv, parse_overrides
from training.presets import PRESETS, get_preset
from training.progress import Progress

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOCAL_DIR = REPO_ROOT / "local-runs"
LOCAL_WORKERS = 2
"""Two CPU workers: the smallest run that is still multi-process SPMD (and fits 2 cores)."""

EXCLUDES = [".venv", ".git", "local-runs", "runs", "build", "*.egg-info", "**/__pycache__",
            ".pytest_cache", ".hypothesis"]
"""Kept out of the working directory Ray uploads (it also skips .gitignore'd files)."""

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def submission_id_for(run_name: str) -> str:
    """One Ray job per run: submitting the same run again finds the existing job."""
    return "maxtext-" + re.sub(r"[^A-Za-z0-9_.-]", "-", run_name)


def unique_run_name(base: str) -> str:
    return f"{base}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


@dataclass(frozen=True)
class Plan:
    spec: JobSpec
    entrypoint: str
    runtime_env: dict
    checkpoints: str
    """Where MaxText writes the checkpoints, as the user can find them."""


def plan_cluster(args: argparse.Namespace, outputs: stack_outputs.StackOutputs) -> Plan:
    preset = get_preset(args.preset or "llama3-8b")
    if preset.backend != "tpu":
        raise ConfigError("--preset", preset.name, "a TPU preset for a cluster run (tiny-cpu is for --local)")
    overrides = parse_overrides(args.overrides)
    overrides.setdefault("run_name", unique_run_name(preset.run_name))
    elastic = preset.elastic or args.elastic or args.min_slices is not None
    spec = JobSpec(
        backend="tpu",
        maxtext_argv=tuple(
            maxtext_argv(preset, outputs.checkpoint_dir.rstrip("/") + "/", overrides, args.config)
        ),
        slices=args.slices or outputs.num_slices,
        min_slices=(args.min_slices or outputs.elastic_min_slices) if elastic else None,
        generation=outputs.tpu_generation,
        topology=outputs.topology,
        max_failures=args.max_failures,
    )
    if spec.slices > outputs.num_slices:
        raise ConfigError("--slices", spec.slices, f"at most the stack's numSlices ({outputs.num_slices})")
    spec.validate()
    bucket_path = f"gs://{outputs.bucket_name}/{spec.run_name}/checkpoints"
    return Plan(spec, _entrypoint("python", spec), _runtime_env(), bucket_path)


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
    overrides = parse_overrides(args.overrides)
    overrides.setdefault("run_name", unique_run_name(preset.run_name))
    spec = JobSpec(
        backend="cpu",
        maxtext_argv=tuple(maxtext_argv(preset, str(out_dir), overrides, args.config)),
        slices=args.slices or LOCAL_WORKERS,
        min_slices=args.min_slices or (1 if args.elastic else None),
        max_failures=args.max_failures,
        storage_path=str(out_dir / "ray-train"),
    )
    spec.validate()
    # The driver runs on this machine: use this interpreter, not whatever `python` is on PATH.
    return Plan(
        spec,
        _entrypoint(shlex.quote(sys.executable), spec),
        _runtime_env(extra_excludes=_inside_repo(out_dir)),
        str(out_dir / spec.run_name / "checkpoints"),
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


def connect(address: str, hint: str):
    """A JobSubmissionClient for ``address``, or a one-line ClusterError."""
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception as e:  # noqa: BLE001 - requests, aiohttp and Ray raise different types here
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ClusterError(f"cannot reach the Ray Jobs API at {address}: {reason} ({hint})") from None


def submit_or_attach(client, plan: Plan, log) -> str:
    """Submit the job unless a job of the same run exists; return its submission id."""
    sid = submission_id_for(plan.spec.run_name)
    existing = _job_status(client, sid)
    if existing is None:
        try:
            client.submit_job(
                entrypoint=plan.entrypoint,
                submission_id=sid,
                runtime_env=plan.runtime_env,
                metadata={"run_name": plan.spec.run_name},
            )
            log(f"submitted {sid}: {plan.entrypoint}")
            return sid
        except RuntimeError as e:
            if "already" not in str(e):
                raise ClusterError(f"the Ray Jobs API refused {sid}: {str(e).splitlines()[0]}") from None
            existing = _job_status(client, sid)  # a concurrent submit of the same run won
    log(f"{sid} already exists ({existing}); following it instead of submitting a second job")
    return sid


def _job_status(client, sid: str) -> str | None:
    try:
        return str(client.get_job_status(sid).value)
    except RuntimeError as e:
        if "does not exist" in str(e) or "404" in str(e):
            return None
        raise ClusterError(f"cannot read the status of {sid}: {str(e).splitlines()[0]}") from None


async def _follow(client, sid: str, progress: Progress, total_steps: int | None, echo: bool, log) -> None:
    async for chunk in client.tail_job_logs(sid):
        if echo:
            sys.stdout.write(chunk)
            sys.stdout.flush()
        for step in progress.feed(chunk):
            log(step.describe(total_steps))
    for step in progress.flush():
        log(step.describe(total_steps))


def follow(client, sid: str, progress: Progress, total_steps: int | None, echo: bool, log) -> str:
    """Stream the logs until the job ends; its final status."""
    try:
        asyncio.run(_follow(client, sid, progress, total_steps, echo, log))
    except RuntimeError as e:
        raise ClusterError(
            f"lost the log stream of {sid} ({str(e).splitlines()[0]}); the job keeps running: "
            "run the same command again to follow it"
        ) from None
    return _wait_terminal(client, sid, timeout_s=60)


def stop_run(client, run_name: str, log) -> None:
    """Ctrl-C: stop the run's job if it was submitted and is still going (its id is known up front)."""
    sid = submission_id_for(run_name)
    status = _job_status(client, sid)
    if status is None or status in TERMINAL:
        return
    log(f"interrupted: stopping {sid}")
    client.stop_job(sid)
    _wait_terminal(client, sid, timeout_s=60)


def _wait_terminal(client, sid: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    status = _job_status(client, sid)
    while status not in TERMINAL and time.monotonic() < deadline:
        time.sleep(1)
        status = _job_status(client, sid)
    return str(status)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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
    p.add_argument("--max-failures", type=int, help="worker-group restarts (default 3 elastic, 0 static)")
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

    log(f"run_name={plan.spec.run_name} (pass run_name={plan.spec.run_name} to follow or resume this run)")
    started = time.monotonic()
    try:
        with job_client(args, outputs, plan, log) as client:
            # The interrupt may land anywhere from the submission on, even before follow() starts.
            try:
                sid = submit_or_attach(client, plan, log)
                progress = Progress()
                total = int(plan.spec.overrides["steps"]) if "steps" in plan.spec.overrides else None
                status = follow(client, sid, progress, total, not args.quiet, log)
            except KeyboardInterrupt:
                stop_run(client, plan.spec.run_name, log)
                raise
    except ClusterError as e:
        print(f"python -m training.submit: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130

    first, last = progress.first, progress.last
    losses = f", loss {first.loss:.3f} -> {last.loss:.3f}" if first else ""
    log(
        f"{sid} {status} after {time.monotonic() - started:.0f} s: "
        f"{len(progress.steps)} steps{losses}; checkpoints: {plan.checkpoints}"
    )
    return 0 if status == "SUCCEEDED" else 1


@contextmanager
def job_client(args: argparse.Namespace, outputs, plan: Plan, log):
    """A connected JobSubmissionClient; stops the local head or port-forward it opened."""
    if args.address:
        yield connect(args.address, "is the dashboard reachable at --address?")
    elif args.local:
        from training.local_ray import LocalRayHead

        log_path = Path(args.output_dir).resolve() / "ray-head.log"
        with LocalRayHead(num_cpus=plan.spec.slices, log_path=log_path) as head:
            log(f"started a local Ray head: {head.address} (stopped when this command ends)")
            yield connect(head.address, f"see {log_path}")
    else:
        from training.port_forward import PortForward

        with PortForward(
            outputs.namespace, outputs.ray_head_service, outputs.ray_dashboard_port, context=args.kube_context
        ) as pf:
            log(f"port-forward 127.0.0.1:{pf.local_port} -> {outputs.namespace}/{pf.pod}:{pf.pod_port}")
            try:
                client = connect(pf.url, f"port-forward to {outputs.namespace}/{outputs.ray_head_service}")
            except ClusterError as e:
                if pf.stream_error is None:
                    raise
                raise ClusterError(f"{e}; the port-forward stream failed: {pf.stream_error}") from None
            yield client


if __name__ == "__main__":
    sys.exit(main())
