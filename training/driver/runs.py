"""The submit command's run path: one flow, whichever place the run's jobs live in.

:func:`run` lists the run's jobs, decides (``gke_ray_tpu.training.driver.jobs_client``:
submit, follow or report), submits, follows the job to its end with the run's
progress, and says how it ended (``gke_ray_tpu.training.driver.outcome``). Two
places hold jobs, and only they differ:

* :class:`OnJobsApi`: a Ray cluster the command reaches (the stack's RayCluster,
  a local head, ``--address``): jobs are submitted to and read from its Jobs API.
* :class:`OnOwnClusters`: a stack that scales to zero, where each job is a
  RayJob that brings its own RayCluster (``gke_ray_tpu.training.driver.run_cluster``);
  the job is followed on that cluster's head once it is up, through the same
  connection (``gke_ray_tpu.training.driver.connection``).
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Protocol

from gke_ray_tpu.core.job_spec import JobSpec
from gke_ray_tpu.core.kuberay import head_service_name
from gke_ray_tpu.core.ray_job import ray_job
from gke_ray_tpu.core.tpu_catalogue import slice_shape
from gke_ray_tpu.training.driver import connection
from gke_ray_tpu.training.driver.display import for_stream
from gke_ray_tpu.training.driver.jobs_client import TERMINAL, JobsApi, RunJob, decide, latest
from gke_ray_tpu.training.driver.outcome import Followed, job_record, outcome
from gke_ray_tpu.training.driver.progress import Progress
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.training.driver.run_files import JOB_LOG, JobRecord, open_job_log
from gke_ray_tpu.training.driver.submission import LOCAL_WORKERS, Submission

Log = Callable[[str], None]


class Place(Protocol):
    """Where a run's jobs live: what the flow asks of it."""

    def jobs(self, run_name: str) -> list[RunJob]: ...

    def submit(self, sid: str, submission: Submission, attempt: int) -> None: ...

    def spec_of(self, sid: str) -> JobSpec: ...

    def finished(self, sid: str, spec: JobSpec, run_dir: Path, progress: Progress) -> Followed: ...

    def follow(self, sid: str, spec: JobSpec, run_dir: Path, progress: Progress) -> Followed: ...

    def interrupted(self, sid: str, run_name: str) -> None: ...


def run(request: SubmitRequest, outputs, submission: Optional[Submission], log: Log) -> int:
    """Submit (or ``--follow``) the run and follow it to its end; the exit status."""
    run_name = request.follow or submission.spec.run_name  # type: ignore[union-attr]
    started = time.monotonic()
    with place(request, outputs, submission, log) as where:
        jobs = where.jobs(run_name)
        nxt = decide(run_name, jobs) if submission is not None else latest(run_name, jobs)
        if nxt.why:
            log(nxt.why)
        sid = nxt.submission_id
        spec = submission.spec if submission else where.spec_of(sid)
        run_dir, checkpoints = run_files(request, outputs, submission, spec, log)
        progress = Progress()
        # The interrupt may land anywhere from the submission on, even before the job is followed.
        try:
            if nxt.action == "submit":
                assert submission is not None
                where.submit(sid, submission, nxt.attempt)
            follow = where.finished if nxt.action == "report" else where.follow
            followed = follow(sid, spec, run_dir, progress)
        except KeyboardInterrupt:
            where.interrupted(sid, run_name)
            raise
        followed.record.save(run_dir)
    return outcome(nxt, run_name, followed, progress, run_dir, checkpoints, started, log,
                   resubmit=submission is not None)


@contextmanager
def place(request: SubmitRequest, outputs, submission: Optional[Submission], log: Log) -> Iterator[Place]:
    """The place of the run's jobs, connected for as long as the run is followed."""
    if outputs is not None and outputs.scale_to_zero:
        pod_type = slice_shape(outputs.tpu_generation, outputs.topology).pod_type
        log(f"this stack scales its TPU slices to zero: each run brings its own RayCluster, whose {pod_type} "
            "slices take minutes to start before KubeRay submits the job")
        yield OnOwnClusters(request, outputs, log)
        return
    workers = submission.spec.slices if submission else LOCAL_WORKERS
    with connection.job_client(request, outputs, workers, log) as client, JobsApi(client, log) as api:
        yield OnJobsApi(api, request, outputs, log)


def run_files(request: SubmitRequest, outputs, submission: Optional[Submission], spec: JobSpec,
              log: Log) -> tuple[Path, str]:
    """The run's directory on this machine (made) and where its checkpoints go."""
    from gke_ray_tpu.core.job_spec import run_location

    bucket = outputs.bucket_name if outputs else None
    if submission is not None:
        run_dir, checkpoints = submission.run_dir, submission.checkpoints
    else:
        base = Path(str(spec.maxtext["base_output_directory"])) if request.local else request.output_dir.resolve()
        run_dir, checkpoints = base / spec.run_name, run_location(spec, "checkpoints", bucket)
    run_dir.mkdir(parents=True, exist_ok=True)
    log(f"job log: {run_dir / JOB_LOG}" + ("" if request.verbose else " (--verbose streams it here too)"))
    return run_dir, checkpoints


def stream(api: JobsApi, sid: str, spec: JobSpec, outputs, run_dir: Path, progress: Progress,
           verbose: bool, watch: Optional[Callable[[], None]] = None) -> Followed:
    """Follow a job to its end, its log into ``job.log`` and its progress shown; Ray's message when the log says
    nothing of why it failed. ``watch``: called as the log comes (a queued run's place in the queue)."""
    with open_job_log(run_dir, sid) as log_file:
        job_record(api, sid, spec, outputs).save(run_dir)

        def on_text(text: str) -> None:
            log_file.write(text)
            log_file.flush()
            if verbose:
                sys.stdout.write(text)
                sys.stdout.flush()
            for news in progress.feed(text):
                display.news(news)
            if watch is not None:
                watch()

        display = for_stream(spec.steps)
        try:
            api.follow(sid, on_text)
            for news in progress.flush():
                display.news(news)
            status = api.wait_terminal(sid, timeout_s=60)
        finally:
            display.close()
    message = api.message(sid) if status == "FAILED" and not progress.errors else ""
    return Followed(status, message, job_record(api, sid, spec, outputs))


class OnJobsApi:
    """The jobs of a Ray cluster the command reaches, through its Jobs API."""

    def __init__(self, api: JobsApi, request: SubmitRequest, outputs, log: Log):
        self.api, self.request, self.outputs, self.log = api, request, outputs, log

    def jobs(self, run_name: str) -> list[RunJob]:
        return self.api.run_jobs(run_name)

    def submit(self, sid: str, submission: Submission, attempt: int) -> None:
        metadata = {"run_name": submission.spec.run_name, "attempt": str(attempt)}
        if self.api.submit(sid, submission.entrypoint, submission.runtime_env, metadata):
            self.log(f"submitted {sid}: {submission.entrypoint}")
        else:
            self.log(f"{sid} was submitted meanwhile; following it")

    def spec_of(self, sid: str) -> JobSpec:
        return JobSpec.from_entrypoint(self.api.entrypoint(sid))

    def finished(self, sid: str, spec: JobSpec, run_dir: Path, progress: Progress) -> Followed:
        """A job that ended: its whole log from Ray, saved here."""
        with open_job_log(run_dir, sid) as log_file:
            job_record(self.api, sid, spec, self.outputs).save(run_dir)
            text = self.api.logs(sid)
            log_file.write(text)
            if self.request.verbose:
                sys.stdout.write(text)
                sys.stdout.flush()
        progress.feed(text)
        progress.flush()
        return Followed(self.api.status(sid) or "UNKNOWN", "", job_record(self.api, sid, spec, self.outputs))

    def follow(self, sid: str, spec: JobSpec, run_dir: Path, progress: Progress) -> Followed:
        return stream(self.api, sid, spec, self.outputs, run_dir, progress, self.request.verbose)

    def interrupted(self, sid: str, run_name: str) -> None:
        """Ctrl-C: stop the job if it was submitted and is still going (its id is known up front)."""
        status = self.api.status(sid)
        if status is None or status in TERMINAL:
            return
        self.log(f"interrupted: stopping {sid}")
        self.api.stop(sid)
        self.api.wait_terminal(sid, timeout_s=60)


class OnOwnClusters:
    """The RayJobs of a stack that scales to zero, each job on a RayCluster of its own."""

    def __init__(self, request: SubmitRequest, outputs, log: Log):
        from gke_ray_tpu.training.driver import port_forward, run_cluster

        self.request, self.outputs, self.log = request, outputs, log
        self.core, custom = port_forward.kube_apis(request.kube_context, log)
        self.runs = run_cluster.RunClusters(self.core, custom, outputs.namespace, log, outputs=outputs)
        self.names: dict[str, str] = {}
        """The RayJob of each job id, once known."""

    def jobs(self, run_name: str) -> list[RunJob]:
        return self.runs.run_jobs(run_name)

    def submit(self, sid: str, submission: Submission, attempt: int) -> None:
        from gke_ray_tpu.training.driver import run_cluster

        assert submission.code_files is not None
        connection.check_kuberay(self.core, self.log, own_clusters=True)
        manifest = ray_job(run_cluster.submitted_run(sid, submission, self.outputs, self.request))
        if self.runs.queue is not None:  # a run the queue could never admit is refused before anything is made
            self.runs.queue.check_admissible(manifest, submission.spec.slices, self.log)
        run_cluster.upload_archive(run_cluster.gcs_filesystem(), self.outputs.bucket_name, submission.code_files,
                                   self.log)
        name = manifest["metadata"]["name"]
        where = f"RayJob {self.outputs.namespace}/{name}"
        created = self.runs.create(manifest)
        self.names[sid] = name
        if created:
            queued = f" in queue {self.outputs.local_queue}" if self.runs.queue is not None else ""
            self.log(f"created {where}{queued} for {sid} (its own RayCluster; KubeRay deletes it when the job ends): "
                     f"{submission.entrypoint}")
        else:
            self.log(f"{where} was created meanwhile; following it")

    def _ray_job(self, sid: str) -> dict:
        found = self.runs.read(self.names[sid]) if sid in self.names else self.runs.find(sid)
        self.names[sid] = found["metadata"]["name"]
        return found

    def spec_of(self, sid: str) -> JobSpec:
        return JobSpec.from_entrypoint(self._ray_job(sid)["spec"]["entrypoint"])

    def finished(self, sid: str, spec: JobSpec, run_dir: Path, progress: Progress) -> Followed:
        """A run whose cluster is gone: its RayJob's record, and the log this machine saved while it followed it."""
        from gke_ray_tpu.training.driver import run_cluster

        found = self._ray_job(sid)
        record = saved_record(run_dir, sid) or job_record(run_cluster.RayJobTiming(found), sid, spec, self.outputs)
        saved = run_dir / JOB_LOG
        self.log(f"its cluster is gone; the job's log is what this machine saved: {saved}" if saved.exists()
                 else "its cluster is gone, and this machine saved no log of it")
        if saved.exists():
            progress.feed(saved.read_text(encoding="utf-8", errors="replace"))
            progress.flush()
        return Followed(run_cluster.job_status(found), "", record)

    def follow(self, sid: str, spec: JobSpec, run_dir: Path, progress: Progress) -> Followed:
        """Wait for the run's cluster, follow its job there; again on the new cluster of each KubeRay retry."""
        from gke_ray_tpu.training.driver import run_cluster

        name = self._ray_job(sid)["metadata"]["name"]
        while True:
            deadline = (self.runs.read(name).get("spec") or {}).get("preRunningDeadlineSeconds")
            waited = self.runs.wait_for_cluster(name, deadline)
            if waited.cluster is None:  # Kueue's or KubeRay's reason is the run's error line
                record = job_record(run_cluster.RayJobTiming(waited.ray_job), sid, spec, self.outputs)
                if waited.given_up:
                    return Followed("FAILED", waited.given_up, record)
                return Followed(run_cluster.job_status(waited.ray_job), run_cluster.ended_line(waited.ray_job), record)
            head = head_service_name(waited.cluster)
            with connection.job_client(self.request, self.outputs, spec.slices, self.log, head_service=head) as client, \
                    JobsApi(client, self.log) as api:
                followed = stream(api, sid, spec, self.outputs, run_dir, progress, self.request.verbose,
                                  self._watch(name))
            # A failed job may be retried: KubeRay says so once it has seen the job end.
            after = waited.ray_job if followed.status == "SUCCEEDED" else self.runs.wait_after_job(name, waited.cluster)
            if (after.get("status") or {}).get("jobDeploymentStatus") not in (*run_cluster.FINISHED, "Running"):
                self.log(f"{sid} {followed.status} on RayCluster {waited.cluster}; KubeRay retries the run on a new "
                         f"cluster (backoffLimit {after['spec'].get('backoffLimit', 0)})")
                continue
            self.log(f"KubeRay deletes RayCluster {waited.cluster} {after['spec'].get('ttlSecondsAfterFinished', 0)} s "
                     "after the job ended; GKE then removes its TPU nodes")
            return followed

    def _watch(self, name: str) -> Optional[Callable[[], None]]:
        """While a queued run's job runs: what Kueue says of it when that changes (an elastic run's growth)."""
        if self.runs.queue is None:
            return None
        from gke_ray_tpu.training.driver import queue_status, run_cluster

        return queue_status.Watch(self.runs.queue, lambda: self.runs.read(name), self.log, run_cluster.QUEUE_WATCH_S,
                                  said=self.runs.queue.standing(self.runs.read(name)).news)

    def interrupted(self, sid: str, run_name: str) -> None:
        """Ctrl-C leaves the run going on its own cluster: how to follow it again, and how to stop it."""
        if sid not in self.names:
            return  # interrupted before its RayJob was created: nothing runs
        source = f"--outputs-file {self.request.outputs_file}" if self.request.outputs_file \
            else f"--stack {self.request.stack}"
        stop = f"`kubectl delete rayjob -n {self.outputs.namespace} {self.names[sid]}`"
        self.log(f"interrupted: run {run_name} keeps going on its own cluster. Follow it again with "
                 f"`python -m gke_ray_tpu.training.submit {source} --follow {run_name}`; stop it (and delete its cluster) "
                 f"with {stop}")


def saved_record(run_dir: Path, sid: str) -> Optional[JobRecord]:
    """The record this machine saved while it followed job ``sid`` (Ray's times, not the RayJob's), if any."""
    try:
        record = JobRecord.load(run_dir)
    except FileNotFoundError:
        return None
    return record if record.submission_id == sid else None
