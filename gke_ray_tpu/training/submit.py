"""Post-deploy step: submit the MaxText job to the stack's RayCluster, or run it locally.

    python -m gke_ray_tpu.training.submit --preset llama3-70b --outputs-file outputs.json
    python -m gke_ray_tpu.training.submit --preset llama3-8b-elastic --stack dev
    python -m gke_ray_tpu.training.submit --outputs-file outputs.json --follow <run>
    python -m gke_ray_tpu.training.submit --local
    python -m gke_ray_tpu.training.submit --outputs-file outputs.json --dashboard

Both paths build the trainer's command line from a preset (plus ``key=value``
overrides), validate it, reach a Ray Jobs API (through a Kubernetes
port-forward to the head service, a local head started here, or ``--address``),
submit with a submission id derived from the run name (running the command
again follows, reports or resumes that run: ``gke_ray_tpu.training.driver.jobs_client``),
show progress while the job runs (``gke_ray_tpu.training.driver.display``; the job's whole
log goes to ``<run dir>/job.log``, Ray's record of it to ``job.json``), print the
run's goodput and draw its figure (``gke_ray_tpu.training.report``) and exit with the job's
outcome. ``--follow`` attaches to a run without submitting anything: a run
declared in the stack (a RayJob) or one submitted before. ``--dashboard`` only
forwards a local port to the RayCluster's Ray dashboard, until Ctrl-C.

On a stack that scales to zero (its outputs carry ``rayClusterSpec``) there is
no RayCluster to submit to: each run is a RayJob that brings its own
(``gke_ray_tpu.training.driver.run_cluster``), the port-forward goes to that cluster's head
once it is up, and Ctrl-C leaves the run going.

Exit status: 0 job succeeded; 1 job failed or was stopped; 2 bad arguments or
stack outputs; 3 cluster unreachable; 130 interrupted (the job is stopped, except
a run with its own cluster).
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kuberay import head_service_name
from gke_ray_tpu.core.job_spec import COLD_START_TIMEOUT_S, JobSpec, run_location
from gke_ray_tpu.core.tpu_catalogue import slice_shape
from gke_ray_tpu.training.driver import ray_auth, retry, stack_outputs
from gke_ray_tpu.training.driver.display import PlainDisplay, for_stream
from gke_ray_tpu.training.driver.errors import ClusterError
from gke_ray_tpu.training.driver.jobs_client import TERMINAL, JobsApi, decide, latest
from gke_ray_tpu.training.driver.progress import ERROR_LINES, Progress
from gke_ray_tpu.training.driver.ray_auth import RayToken
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.training.driver.run_files import FIGURE, JOB_LOG, JobRecord, open_job_log
from gke_ray_tpu.training.driver.submission import LOCAL_WORKERS, Submission, for_cluster, for_local

_RAY_CLIENT_LOGGERS = (
    "ray.dashboard.modules.dashboard_sdk",
    "ray.dashboard.modules.job.sdk",
    "ray._private.runtime_env.packaging",
)
"""Ray's INFO lines about uploading the job's packages and closing log streams: noise unless --verbose."""


def connect(address: str, hint: str, log: Callable[[str], None], verbose: bool = False,
            token: RayToken | None = None):
    """A JobSubmissionClient for ``address`` that sends ``token`` on every call and on the log stream (retried while
    unreachable), or a one-line ClusterError; a refused token is one line naming where it came from."""
    from ray.job_submission import JobSubmissionClient

    if not verbose:  # after the import: Ray sets these loggers up when their modules load
        for name in _RAY_CLIENT_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)

    token = token or ray_auth.from_env()
    what = f"cannot reach the Ray Jobs API at {address}"
    try:
        return retry.call(lambda: JobSubmissionClient(address, headers=token.headers), what, log)
    except ClusterError as e:
        raise ClusterError(f"{e} ({hint})") from None
    except Exception as e:  # noqa: BLE001 - requests, aiohttp and Ray raise different types here
        status = ray_auth.refusal_status(e)
        if status is not None:
            raise ClusterError(f"the Ray Jobs API at {address} refused the submit command: {token.refused(status)}") \
                from None
        raise ClusterError(f"{what}: {retry.reason(e)} ({hint})") from None


def follow(api: JobsApi, sid: str, progress: Progress, display: PlainDisplay, on_text: Callable[[str], None]) -> str:
    """Stream the logs until the job ends (progress per step and per restart); its final status."""

    def feed(text: str) -> None:
        on_text(text)
        for news in progress.feed(text):
            display.news(news)

    api.follow(sid, feed)
    for news in progress.flush():
        display.news(news)
    return api.wait_terminal(sid, timeout_s=60)


def stop_on_interrupt(api: JobsApi, sid: str, log: Callable[[str], None]) -> None:
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
    if first and last:
        text += f", loss {first.loss:.3f} -> {last.loss:.3f}"
    restarts = len(progress.groups) - 1
    restored = [str(g.restored_step) for g in progress.groups if g.restored_step is not None]
    if restarts > 0:
        text += f", {restarts} restart{'s' * (restarts > 1)}"
    if restored:
        text += f" (restored checkpoint {', '.join(restored)})"
    return text


def main(argv: Optional[list[str]] = None) -> int:
    try:
        request = SubmitRequest.from_argv(argv)
        outputs = None
        if not request.local:
            outputs = (
                stack_outputs.load_file(request.outputs_file)
                if request.outputs_file
                else stack_outputs.load_stack(request.stack or "")
            )
        if request.dashboard:
            return dashboard(request, outputs)
        if request.follow and request.local and not request.address:
            raise ConfigError("--follow", request.follow, "a run on a Ray head that outlives this command: add --address")
        submission = None if request.follow else (for_local(request) if request.local else for_cluster(request, outputs))
    except ConfigError as e:
        print(f"python -m gke_ray_tpu.training.submit: error: {e}", file=sys.stderr)
        return 2
    try:
        return _run(request, outputs, submission)
    except ConfigError as e:
        print(f"python -m gke_ray_tpu.training.submit: error: {e}", file=sys.stderr)
        return 2
    except ClusterError as e:
        print(f"python -m gke_ray_tpu.training.submit: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130


def _run(request: SubmitRequest, outputs, submission: Optional[Submission]) -> int:
    run_name = request.follow or submission.spec.run_name  # type: ignore[union-attr]
    plain = PlainDisplay(None, sys.stderr)
    log = plain.note
    if submission is not None:
        log(f"run_name={run_name} (pass run_name={run_name} to follow or resume this run)")
        for note in submission.spec.notes:
            log(note)
    if outputs is not None and outputs.scale_to_zero:
        pod_type = slice_shape(outputs.tpu_generation, outputs.topology).pod_type
        if outputs.per_run_clusters:
            log(f"this stack scales its TPU slices to zero: each run brings its own RayCluster, whose {pod_type} "
                "slices take minutes to start before KubeRay submits the job")
            return _run_on_own_cluster(request, outputs, submission, run_name, log)
        log(
            f"this cluster scales its TPU slices to zero: a run's first step waits for its {pod_type} slices to start "
            f"(minutes; Ray Train waits {COLD_START_TIMEOUT_S} s for them, then asks again)"
        )
    started = time.monotonic()
    workers = submission.spec.slices if submission else LOCAL_WORKERS
    with job_client(request, outputs, workers, log) as client, JobsApi(client, log) as api:
        jobs = api.run_jobs(run_name)
        nxt = decide(run_name, jobs) if submission is not None else latest(run_name, jobs)
        if nxt.why:
            log(nxt.why)
        spec = submission.spec if submission else JobSpec.from_entrypoint(api.entrypoint(nxt.submission_id))
        run_dir, checkpoints = _run_files(request, outputs, submission, spec, log)
        sid = nxt.submission_id
        progress = Progress()
        # The interrupt may land anywhere from the submission on, even before follow() starts.
        try:
            if nxt.action == "submit":
                assert submission is not None
                metadata = {"run_name": run_name, "attempt": str(nxt.attempt)}
                if api.submit(sid, submission.entrypoint, submission.runtime_env, metadata):
                    log(f"submitted {sid}: {submission.entrypoint}")
                else:
                    log(f"{sid} was submitted meanwhile; following it")
            if nxt.action == "report":
                with open_job_log(run_dir, sid) as log_file:
                    _job_record(api, sid, spec, outputs).save(run_dir)
                    text = api.logs(sid)
                    log_file.write(text)
                    if request.verbose:
                        sys.stdout.write(text)
                        sys.stdout.flush()
                progress.feed(text)
                progress.flush()
                status, message = api.status(sid) or "UNKNOWN", ""
                record = _job_record(api, sid, spec, outputs)
                record.save(run_dir)
            else:
                status, message, record = _stream(api, sid, spec, outputs, run_dir, progress, request.verbose)
        except KeyboardInterrupt:
            stop_on_interrupt(api, sid, log)
            raise
    return _outcome(nxt, run_name, status, message, progress, record, run_dir, checkpoints, started, log,
                    resubmit=submission is not None)


def _run_files(request: SubmitRequest, outputs, submission: Optional[Submission], spec: JobSpec,
               log: Callable[[str], None]) -> tuple[Path, str]:
    """The run's directory on this machine (made) and where its checkpoints go."""
    bucket = outputs.bucket_name if outputs else None
    run_dir = submission.run_dir if submission else _follow_run_dir(request, spec)
    checkpoints = submission.checkpoints if submission else run_location(spec, "checkpoints", bucket)
    run_dir.mkdir(parents=True, exist_ok=True)
    log(f"job log: {run_dir / JOB_LOG}" + ("" if request.verbose else " (--verbose streams it here too)"))
    return run_dir, checkpoints


def _stream(api: JobsApi, sid: str, spec: JobSpec, outputs, run_dir: Path, progress: Progress,
            verbose: bool) -> tuple[str, str, JobRecord]:
    """Follow a job to its end, its log into ``job.log``: its status, Ray's message when the log says nothing, its
    record."""
    with open_job_log(run_dir, sid) as log_file:
        _job_record(api, sid, spec, outputs).save(run_dir)

        def on_text(text: str) -> None:
            log_file.write(text)
            log_file.flush()
            if verbose:
                sys.stdout.write(text)
                sys.stdout.flush()

        display = for_stream(spec.steps)
        try:
            status = follow(api, sid, progress, display, on_text)
        finally:
            display.close()
    message = api.message(sid) if status == "FAILED" and not progress.errors else ""
    record = _job_record(api, sid, spec, outputs)
    record.save(run_dir)
    return status, message, record


def _outcome(nxt, run_name: str, status: str, message: str, progress: Progress, record: JobRecord, run_dir: Path,
             checkpoints: str, started: float, log: Callable[[str], None], resubmit: bool) -> int:
    """The run's last lines (outcome, goodput, figure, error lines) and the exit status."""
    sid = nxt.submission_id
    if nxt.action == "report":
        log(f"{sid} {status}: {summary(progress)}; checkpoints: {checkpoints}")
        _report(run_dir, record, run_name, log)
        return 0 if status == "SUCCEEDED" else 1
    log(f"{sid} {status} after {time.monotonic() - started:.0f} s: {summary(progress)}; checkpoints: {checkpoints}")
    _report(run_dir, record, run_name, log)
    if status == "SUCCEEDED":
        return 0
    if status == "FAILED":
        lines = list(progress.errors) or [line for line in message.splitlines() if line.strip()][-ERROR_LINES:]
        log(f"{sid} FAILED; its last error lines:")
        for line in lines or [f"(none in the job's log; see {run_dir / JOB_LOG})"]:
            log(f"    {line}")
    elif status == "STOPPED":
        log(f"{sid} was STOPPED (Ctrl-C, `ray job stop` or the dashboard)")
    else:
        log(f"{sid} is still {status} though its log ended; run the same command again to follow it")
        return 1
    if resubmit:
        log(f"run the same command again to resume run {run_name} from its latest checkpoint as a new attempt")
    return 1


def _run_on_own_cluster(request: SubmitRequest, outputs, submission: Optional[Submission], run_name: str,
                        log: Callable[[str], None]) -> int:
    """A stack that scales to zero: the run is a RayJob that brings its own RayCluster (gke_ray_tpu.training.driver.run_cluster)."""
    from gke_ray_tpu.training.driver import port_forward, run_cluster

    started = time.monotonic()
    core, custom = port_forward.kube_apis(request.kube_context)
    runs = run_cluster.RunClusters(core, custom, outputs.namespace, log)
    jobs = runs.run_jobs(run_name)
    nxt = decide(run_name, jobs) if submission is not None else latest(run_name, jobs)
    if nxt.why:
        log(nxt.why)
    sid = nxt.submission_id
    if nxt.action == "submit":
        assert submission is not None and submission.code_files is not None
        _check_kuberay(core, log)
        run_cluster.upload_archive(run_cluster.gcs_filesystem(), outputs.bucket_name, submission.code_files, log)
        manifest = run_cluster.run_manifest(
            sid, outputs.namespace, outputs.ray_cluster_spec, submission.spec.slices, submission.entrypoint,
            submission.runtime_env,
            request.backoff_limit, request.pre_running_deadline_seconds,
        )
        name = manifest["metadata"]["name"]
        if runs.create(manifest):
            log(f"created RayJob {outputs.namespace}/{name} for {sid} (its own RayCluster; KubeRay deletes it when "
                f"the job ends): {submission.entrypoint}")
        else:
            log(f"RayJob {outputs.namespace}/{name} was created meanwhile; following it")
        ray_job = runs.read(name)
    else:
        ray_job = runs.find(sid)
        name = ray_job["metadata"]["name"]
    spec = submission.spec if submission else JobSpec.from_entrypoint(ray_job["spec"]["entrypoint"])
    run_dir, checkpoints = _run_files(request, outputs, submission, spec, log)
    progress = Progress()
    try:
        if nxt.action == "report":
            status, message = run_cluster.job_status(ray_job), ""
            record = _saved_record(run_dir, sid) or _job_record(run_cluster.RayJobTiming(ray_job), sid, spec, outputs)
            saved = run_dir / JOB_LOG
            log(f"its cluster is gone; the job's log is what this machine saved: {saved}" if saved.exists()
                else "its cluster is gone, and this machine saved no log of it")
            if saved.exists():
                progress.feed(saved.read_text(encoding="utf-8", errors="replace"))
                progress.flush()
        else:
            status, message, record = _follow_on_own_cluster(request, outputs, runs, name, sid, spec, run_dir,
                                                             progress, log)
    except KeyboardInterrupt:
        source = f"--outputs-file {request.outputs_file}" if request.outputs_file else f"--stack {request.stack}"
        log(f"interrupted: run {run_name} keeps going on its own cluster. Follow it again with "
            f"`python -m gke_ray_tpu.training.submit {source} --follow {run_name}`; stop it (and delete its cluster) with "
            f"`kubectl delete rayjob -n {outputs.namespace} {name}`")
        raise
    record.save(run_dir)
    return _outcome(nxt, run_name, status, message, progress, record, run_dir, checkpoints, started, log,
                    resubmit=submission is not None)


def _follow_on_own_cluster(request: SubmitRequest, outputs, runs, name: str, sid: str, spec: JobSpec, run_dir: Path,
                           progress: Progress, log: Callable[[str], None]) -> tuple[str, str, JobRecord]:
    """Wait for the run's cluster, follow its job there; again on the new cluster of each KubeRay retry."""
    from gke_ray_tpu.training.driver import run_cluster

    while True:
        ray_job = runs.read(name)
        deadline = (ray_job.get("spec") or {}).get("preRunningDeadlineSeconds")
        waited = runs.wait_for_cluster(name, deadline)
        if waited.cluster is None:  # KubeRay's reason is the run's error line
            record = _job_record(run_cluster.RayJobTiming(waited.ray_job), sid, spec, outputs)
            return run_cluster.job_status(waited.ray_job), run_cluster.ended_line(waited.ray_job), record
        head = head_service_name(waited.cluster)
        with job_client(request, outputs, spec.slices, log, head_service=head) as client, \
                JobsApi(client, log) as api:
            status, message, record = _stream(api, sid, spec, outputs, run_dir, progress, request.verbose)
        # A failed job may be retried: KubeRay says so once it has seen the job end.
        after = waited.ray_job if status == "SUCCEEDED" else runs.wait_after_job(name, waited.cluster)
        if (after.get("status") or {}).get("jobDeploymentStatus") not in (*run_cluster.FINISHED, "Running"):
            log(f"{sid} {status} on RayCluster {waited.cluster}; KubeRay retries the run on a new cluster "
                f"(backoffLimit {after['spec'].get('backoffLimit', 0)})")
            continue
        log(f"KubeRay deletes RayCluster {waited.cluster} {after['spec'].get('ttlSecondsAfterFinished', 0)} s after "
            "the job ended; GKE then removes its TPU nodes")
        return status, message, record


def _saved_record(run_dir: Path, sid: str) -> Optional[JobRecord]:
    """The record this machine saved while it followed job ``sid`` (Ray's times, not the RayJob's), if any."""
    try:
        record = JobRecord.load(run_dir)
    except FileNotFoundError:
        return None
    return record if record.submission_id == sid else None


def _check_kuberay(core, log: Callable[[str], None]) -> None:
    from kubernetes.client import ApiextensionsV1Api

    from gke_ray_tpu.training.driver.cluster_checks import check_kuberay

    check_kuberay(ApiextensionsV1Api(core.api_client), log)


def _follow_run_dir(request: SubmitRequest, spec: JobSpec) -> Path:
    if request.local:
        return Path(str(spec.maxtext["base_output_directory"])) / spec.run_name
    return request.output_dir.resolve() / spec.run_name


def _job_record(api: JobsApi, sid: str, spec: JobSpec, outputs) -> JobRecord:
    """What the goodput accounting needs to know of the job once Ray's record of it is gone."""
    status, submitted, ended = api.timing(sid)
    metrics_at = run_location(spec, "tensorboard", outputs.bucket_name if outputs else None)
    if outputs is None:
        return JobRecord(sid, submitted, ended, status, metrics_at, chips=0, usd_per_chip_hour=0.0,
                         price_note="a local run: no TPU")
    # A stack that scales to zero holds the run's slices only; otherwise every slice is paid for.
    slices = spec.slices if outputs.scale_to_zero else outputs.num_slices
    rate, note = outputs.usd_per_chip_hour()
    return JobRecord(sid, submitted, ended, status, metrics_at, slices * outputs.chips_per_slice, rate, note)


def _report(run_dir: Path, record: JobRecord, title: str, log: Callable[[str], None]) -> None:
    """The run's goodput line and figure, from what the run wrote, when they can be read."""
    from gke_ray_tpu.training import report

    built = report.write_report(run_dir, record.metrics_dir, run_dir / FIGURE, title=title)
    log(built.goodput.line() if built.goodput else built.no_goodput)
    log(f"figure: {built.figure}" if built.figure else f"no figure: {built.no_figure}")


def dashboard(request: SubmitRequest, outputs) -> int:
    """Forward a local port to the RayCluster's dashboard until Ctrl-C; its URL goes to stdout."""
    from gke_ray_tpu.training.driver.port_forward import PortForward

    log = PlainDisplay(None, sys.stderr).note
    try:
        if outputs.per_run_clusters:
            service = _running_head(request, outputs, log)
        elif request.follow:
            raise ConfigError("--follow", request.follow,
                              "no --follow with --dashboard: this stack's jobs share its one RayCluster")
        else:
            service = outputs.ray_head_service
        with PortForward(outputs.namespace, service, outputs.ray_dashboard_port, context=request.kube_context) as pf:
            log(f"Ray dashboard of {outputs.namespace}/{service} (pod {pf.pod}, port {pf.pod_port}) "
                "at the URL below; Ctrl-C closes the port-forward")
            print(pf.url, flush=True)
            hold()
    except ConfigError as e:
        print(f"python -m gke_ray_tpu.training.submit: error: {e}", file=sys.stderr)
        return 2
    except ClusterError as e:
        print(f"python -m gke_ray_tpu.training.submit: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        log("port-forward closed")
    return 0


def _running_head(request: SubmitRequest, outputs, log: Callable[[str], None]) -> str:
    """The head service of the running run's own cluster (``--follow RUN``'s, or the only one running)."""
    from gke_ray_tpu.training.driver import port_forward, run_cluster

    runs = run_cluster.RunClusters(*port_forward.kube_apis(request.kube_context), outputs.namespace, log)
    running = [job for job in runs.ray_jobs() if run_cluster.job_status(job) not in TERMINAL]
    if request.follow:
        mine = {job.submission_id for job in runs.run_jobs(request.follow)}
        running = [job for job in running if job["spec"]["jobId"] in mine]
        if not running:
            raise ConfigError("--follow", request.follow, "a run that is running: its cluster is gone once it ended")
    elif len(running) != 1:
        ids = ", ".join(job["spec"]["jobId"] for job in running) or "none"
        raise ConfigError("--dashboard", f"{len(running)} runs running ({ids})",
                          "one running run, or --follow RUN to pick one: each run has its own cluster")
    cluster = (running[-1].get("status") or {}).get("rayClusterName")
    if not cluster:
        raise ClusterError(f"RayJob {running[-1]['metadata']['name']} has no RayCluster yet; try again in a minute")
    return head_service_name(cluster)


def hold() -> None:
    """Wait for Ctrl-C."""
    while True:
        time.sleep(3600)


@contextmanager
def job_client(request: SubmitRequest, outputs, workers: int, log: Callable[[str], None],
               head_service: Optional[str] = None) -> Iterator:
    """A connected JobSubmissionClient; stops the local head or port-forward it opened.

    ``head_service``: the head service of a run's own RayCluster (default: the stack's RayCluster's)."""
    if request.address:
        yield connect(request.address, "is the dashboard reachable at --address?", log, request.verbose)
    elif request.local:
        from gke_ray_tpu.training.driver.local_ray import LocalRayHead

        log_path = request.output_dir.resolve() / "ray-head.log"
        with LocalRayHead(num_cpus=workers, log_path=log_path) as head:
            log(f"started a local Ray head: {head.address} (stopped when this command ends)")
            yield connect(head.address, f"see {log_path}", log, request.verbose,
                          RayToken(head.token, "the local head"))
    else:
        from gke_ray_tpu.training.driver.port_forward import PortForward

        service = head_service or outputs.ray_head_service
        with PortForward(outputs.namespace, service, outputs.ray_dashboard_port, context=request.kube_context) as pf:
            log(f"port-forward 127.0.0.1:{pf.local_port} -> {outputs.namespace}/{pf.pod}:{pf.pod_port}")
            if head_service is None:  # a run's own cluster was checked before its RayJob was created
                _check_kuberay(pf.api, log)
            token = ray_auth.from_secret(pf.api, outputs.namespace, service)
            try:
                client = connect(
                    pf.url, f"port-forward to {outputs.namespace}/{service}", log, request.verbose, token,
                )
            except ClusterError as e:
                if pf.stream_error is None:
                    raise
                raise ClusterError(f"{e}; the port-forward stream failed: {pf.stream_error}") from None
            yield client


if __name__ == "__main__":
    sys.exit(main())
