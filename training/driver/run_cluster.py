"""A run on a stack that scales its slices to zero: a RayJob that brings its own RayCluster.

Such a stack keeps no RayCluster. Every run is a KubeRay RayJob whose
``rayClusterSpec`` is the one the stack exports (``rayClusterSpec``): KubeRay
creates the cluster, GKE's cluster autoscaler brings up the TPU nodes for its
pods, KubeRay posts the job to the head's Jobs API once every pod is ready
(``HTTPMode``, gke_ray_tpu.core.ray_job) and deletes the cluster when the job ends. The
job's code is the code archive in the bucket (gke_ray_tpu.core.code_archive), which every
Ray pod sees at ``/data``; the job id is the run's submission id
(``spec.jobId``), so the run's RayJobs are found by it, like its Ray jobs on a
held stack (``gke_ray_tpu.training.driver.jobs_client``).

This module is the Kubernetes side: the run's RayJobs, the archive upload, and
the wait for a run's cluster with a line per change of what it waits for
(``waiting for TPU slices: 3 of 8 hosts ready``, and the scheduler's and the
cluster autoscaler's reasons when pods stay pending). The Jobs API side, once
the head is up, is the held stack's: a port-forward to the run's head service.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Mapping, Optional

from gke_ray_tpu.core import code_archive, kueue
from gke_ray_tpu.core.ray_job import OwnCluster, RayJobRun, is_multi_host, max_ray_job_name, ray_job_name
from gke_ray_tpu.training.driver import retry
from gke_ray_tpu.training.driver.errors import ClusterError, api_refusal
from gke_ray_tpu.training.driver.jobs_client import TERMINAL, RunJob, attempt_of, is_job_of
from gke_ray_tpu.training.driver.port_forward import serving
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.training.driver.submission import Submission

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayjobs"

FINISHED = {"Complete", "Failed", "ValidationFailed"}
"""RayJob deployment states after which KubeRay does nothing more with the RayJob (no retry either)."""

SCHEDULING_REASONS = (
    "FailedScheduling", "NotTriggerScaleUp", "TriggeredScaleUp", "FailedScaleUp", "FailedCreate",
    "FailedCreatePodSandBox", "FailedAttachVolume", "FailedMount",
)
"""Events that say why a run's pods are not up yet: the scheduler's, the cluster autoscaler's, KubeRay's (a pod
it could not create: quota) and the kubelet's."""

SUMMARY_CHARS = 400
"""A line of events is cut here: a FailedScheduling message lists every node pool's reason."""

POLL_S = 5.0
"""Seconds between two looks at a waiting run (its RayJob, pods and events): a cold start takes minutes."""
QUEUE_WATCH_S = 60.0
"""Seconds between two looks at a running run's place in the queue (an elastic run's growth)."""


def now() -> float:
    """The command's clock: what it says times in Kueue's terms against (Kueue's backoffs and timeouts)."""
    return time.time()
REMIND_S = 300
"""A waiting run's line again after this long without news, with the time since its RayJob started."""


def submitted_run(submission_id: str, submission: Submission, outputs, request: SubmitRequest) -> RayJobRun:
    """The run of ``submission`` as Ray job ``submission_id``: a RayJob named for it, bringing the stack's cluster
    with the run's slices (``gke_ray_tpu.core.ray_job.ray_job`` builds it), in the stack's queue where it has one,
    where an elastic run starts on its minimum and grows."""
    cluster_spec = outputs.ray_cluster_spec
    spec = submission.spec
    queued = outputs.local_queue is not None
    return RayJobRun(
        name=ray_job_name(submission_id, max_ray_job_name(is_multi_host(cluster_spec))),
        namespace=outputs.namespace,
        command=submission.command(submission_id),
        cluster=OwnCluster(cluster_spec, spec.slices, start_slices=spec.min_slices if queued and spec.elastic else None),
        backoff_limit=request.backoff_limit,
        pre_running_deadline_seconds=submission.pre_running_deadline_seconds,
        labels=kueue.queue_label(outputs.local_queue) if queued else {},
    )


def job_status(ray_job: Mapping) -> str:
    """The Ray job status a RayJob stands for: terminal once KubeRay is done with it, active before (a retry too)."""
    status = ray_job.get("status") or {}
    ray_status = status.get("jobStatus") or ""
    if status.get("jobDeploymentStatus") in FINISHED:
        return ray_status if ray_status in TERMINAL else "FAILED"
    return ray_status if ray_status in ("PENDING", "RUNNING") else "PENDING"


def _epoch(timestamp: Optional[str]) -> Optional[float]:
    """A Kubernetes timestamp (``2026-12-04T06:00:00Z``) as epoch seconds."""
    if not timestamp:
        return None
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def hosts_of(ray_cluster_spec: Mapping) -> int:
    """TPU hosts (worker pods) a run's cluster has when every slice is up."""
    return sum(int(g.get("replicas", 0)) * int(g.get("numOfHosts", 1))
               for g in ray_cluster_spec.get("workerGroupSpecs") or [])


def upload_archive(fs, bucket: str, files: Mapping[str, Path], log: Callable[[str], None]) -> str:
    """Put the code archive in the bucket unless it is there (same code, same name); its object name.

    ``fs``: an fsspec filesystem for ``gs://`` (gcsfs with the user's application-default credentials)."""
    obj = code_archive.archive_object(code_archive.digest(dict(files)))
    path = f"{bucket}/{obj}"
    try:
        if fs.exists(path):
            log(f"code archive gs://{path} is there already")
            return obj
        fs.pipe_file(path, code_archive.archive_zip(files), content_type="application/zip")
    except Exception as e:  # noqa: BLE001 - gcsfs raises OSError, HttpError or google.auth errors
        raise ClusterError(
            f"cannot upload the code archive to gs://{path}: {retry.reason(e)} "
            "(`gcloud auth application-default login` gives this machine credentials)"
        ) from None
    log(f"uploaded the code archive to gs://{path}")
    return obj


def gcs_filesystem():
    """``gs://`` as this machine's user reaches it (gcsfs finds the application-default credentials)."""
    import gcsfs

    return gcsfs.GCSFileSystem()


@dataclass(frozen=True)
class Waited:
    """How the wait for a run's cluster ended."""

    cluster: Optional[str]
    """The run's RayCluster, once its job runs there (None: the RayJob ended first, or Kueue gave it up)."""
    ray_job: dict
    given_up: str = ""
    """Kueue's line, when it gave the run up (its slices never all came, past the queue's requeue limit)."""


class RunClusters:
    """The RayJobs of one namespace, through the Kubernetes API (``CoreV1Api``, ``CustomObjectsApi``)."""

    def __init__(self, core, custom, namespace: str, log: Callable[[str], None],
                 sleep: Callable[[float], None] = time.sleep, poll_s: Optional[float] = None,
                 clock: Optional[Callable[[], float]] = None, outputs=None):
        self.core, self.custom, self.namespace = core, custom, namespace
        self.log, self.sleep, self.clock = log, sleep, clock or now
        self.poll_s = POLL_S if poll_s is None else poll_s
        self.queue = None
        """The stack's queue (``queue_status.RunInQueue``), where its outputs name one."""
        if outputs is not None and outputs.local_queue is not None:
            from gke_ray_tpu.training.driver.queue_status import RunInQueue

            self.queue = RunInQueue(core, custom, namespace, outputs, self._call, self.clock)

    def _call(self, what: str, fn):
        from kubernetes.client.exceptions import ApiException

        try:
            return retry.call(fn, what, self.log)
        except ApiException as e:
            raise ClusterError(f"{what} ({api_refusal(e)}): is the kubeconfig pointing at the stack's "
                               "cluster, and may this user manage RayJobs in its namespace?") from None

    def ray_jobs(self) -> list[dict]:
        listed = self._call(
            f"listing the RayJobs of namespace {self.namespace}",
            lambda: self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL),
        )
        return list(listed.get("items") or [])

    def run_jobs(self, run_name: str) -> list[RunJob]:
        """Every RayJob of ``run_name`` as one of the run's jobs (its Ray job id is ``spec.jobId``)."""
        return [
            RunJob(
                submission_id=job["spec"]["jobId"],
                status=job_status(job),
                started=1000 * (_epoch(job["metadata"].get("creationTimestamp")) or 0),
                attempt=attempt_of(run_name, job["spec"]["jobId"]),
            )
            for job in self.ray_jobs()
            if is_job_of(run_name, (job.get("spec") or {}).get("jobId"))
        ]

    def find(self, submission_id: str) -> dict:
        """The RayJob whose Ray job is ``submission_id``."""
        for job in self.ray_jobs():
            if (job.get("spec") or {}).get("jobId") == submission_id:
                return job
        raise ClusterError(f"no RayJob in namespace {self.namespace} runs {submission_id}")

    def read(self, name: str) -> dict:
        from kubernetes.client.exceptions import ApiException

        def get():
            try:
                return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
            except ApiException as e:
                if e.status == 404:
                    raise ClusterError(f"RayJob {self.namespace}/{name} is gone: someone deleted it, which stopped "
                                       "its run and deleted its cluster") from None
                raise
        return self._call(f"reading RayJob {self.namespace}/{name}", get)

    def create(self, manifest: dict) -> bool:
        """Create the RayJob; False if one of that name exists (a concurrent or retried submit)."""
        from kubernetes.client.exceptions import ApiException

        name = manifest["metadata"]["name"]

        def post():
            try:
                self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, manifest)
                return True
            except ApiException as e:
                if e.status == 409:
                    return False
                raise
        return self._call(f"creating RayJob {self.namespace}/{name}", post)

    def _pods(self, cluster: str) -> list:
        return self._call(
            f"listing the pods of RayCluster {cluster}",
            lambda: self.core.list_namespaced_pod(self.namespace, label_selector=f"ray.io/cluster={cluster}").items,
        )

    def _events(self, name: str, cluster: str) -> str:
        """The latest word of the scheduler, the cluster autoscaler and KubeRay on the run's objects (RayJob
        ``name``, RayCluster ``cluster`` and its pods), one line."""
        events = self._call(
            f"listing the events of namespace {self.namespace}",
            lambda: self.core.list_namespaced_event(self.namespace).items,
        )
        # The latest message per reason, without counts: the line changes when what is said changes.
        latest: dict[str, str] = {}
        for event in sorted(events, key=lambda e: str(e.last_timestamp or e.event_time or "")):
            about = event.involved_object.name or ""
            if event.reason in SCHEDULING_REASONS and (about == name or (cluster and about.startswith(cluster))):
                latest[event.reason] = " ".join((event.message or "").split())
        text = "; ".join(f"{reason}: {message}" for reason, message in latest.items())
        return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 3] + "..."

    def wait_for_cluster(self, name: str, deadline_s: Optional[float] = None) -> Waited:
        """Follow RayJob ``name`` until its job runs on its cluster, or the RayJob ends (or Kueue gives it up).

        A line per change of what it waits for (in the queue: Kueue's word on it), and again every :data:`REMIND_S`
        while nothing changes. ``deadline_s``: the RayJob's preRunningDeadlineSeconds, for the seconds left of it
        (outside a queue: in one, Kueue's eviction comes first and its line says when)."""
        said = {"hosts": "", "events": "", "queue": ""}
        said_at = self.clock()
        while True:
            job = self.read(name)
            status = job.get("status") or {}
            deployment = status.get("jobDeploymentStatus") or ""
            cluster = status.get("rayClusterName") or ""
            if deployment in FINISHED:
                return Waited(None, job)
            if self.queue is not None:
                standing = self.queue.standing(job)
                # In the queue, with no cluster yet, Kueue's line is the one said again after REMIND_S.
                again = not cluster and self.clock() - said_at >= REMIND_S
                if standing.news != said["queue"] or again:
                    self.log(standing.said())
                    said["queue"], said_at = standing.news, self.clock()
                if standing.given_up:
                    return Waited(None, job, standing.line)
            waited = self.clock() - (_epoch(status.get("startTime")) or said_at)
            line = self._hosts_line(name, job, cluster, deployment)
            if line == "running":
                return Waited(cluster, job)
            if line and (line != said["hosts"] or self.clock() - said_at >= REMIND_S):
                self.log(line if line != said["hosts"] else f"{line}, {waited:.0f} s after the RayJob started")
                said["hosts"], said_at = line, self.clock()
            events = self._events(name, cluster)
            if events and events != said["events"]:
                left = "" if deadline_s is None or self.queue is not None else \
                    f" ({max(0.0, deadline_s - waited):.0f} s left of preRunningDeadlineSeconds={deadline_s:.0f})"
                self.log(f"not scheduled yet{left}: {events}")
                said["events"] = events
            self.sleep(self.poll_s)

    def _hosts_line(self, name: str, job: Mapping, cluster: str, deployment: str) -> str:
        """What the run's cluster waits for ("running": its job runs; empty: nothing to say beyond the queue's)."""
        if not cluster:
            if self.queue is not None:  # suspended or not yet started: the queue's line says why
                return ""
            return f"waiting for KubeRay to create the run's RayCluster (RayJob {name}: {deployment or 'new'})"
        pods = self._pods(cluster)
        workers = [p for p in pods if (p.metadata.labels or {}).get("ray.io/node-type") == "worker"]
        head_up = any(serving(p) for p in pods if (p.metadata.labels or {}).get("ray.io/node-type") == "head")
        if deployment == "Running" and head_up:
            return "running"
        hosts = hosts_of(job["spec"]["rayClusterSpec"])
        return (f"waiting for TPU slices: {sum(map(serving, workers))} of {hosts} hosts ready"
                f"{'' if head_up else '; Ray head not ready yet'} (RayCluster {cluster})")

    def wait_after_job(self, name: str, cluster: str, timeout_s: float = 60) -> dict:
        """The RayJob once KubeRay has seen its job end on ``cluster``: finished, or retrying on a new cluster."""
        deadline = self.clock() + timeout_s
        while True:
            job = self.read(name)
            status = job.get("status") or {}
            moved_on = status.get("rayClusterName") != cluster or status.get("jobDeploymentStatus") != "Running"
            if moved_on or self.clock() >= deadline:
                return job
            self.sleep(self.poll_s)


def ended_line(ray_job: Mapping) -> str:
    """Why KubeRay ended a RayJob, in one line."""
    status = ray_job.get("status") or {}
    spec = ray_job.get("spec") or {}
    reason = status.get("reason") or status.get("jobDeploymentStatus") or "ended"
    message = " ".join((status.get("message") or "").split())
    limits = {"PreRunningDeadlineExceeded": "preRunningDeadlineSeconds", "DeadlineExceeded": "activeDeadlineSeconds"}
    limit = f" ({limits[reason]}={spec.get(limits[reason])})" if reason in limits else ""
    return f"RayJob {ray_job['metadata']['name']} ended: {reason}{limit}" + (f": {message}" if message else "")


class RayJobTiming:
    """A RayJob's record of its job (status, start and end), for a run whose cluster, and Ray's record, are gone."""

    def __init__(self, ray_job: Mapping):
        self.ray_job = ray_job

    def timing(self, sid: str) -> tuple[str, float, Optional[float]]:
        status = self.ray_job.get("status") or {}
        started = _epoch(status.get("startTime")) or _epoch(self.ray_job["metadata"].get("creationTimestamp")) or 0.0
        return job_status(self.ray_job), started, _epoch(status.get("endTime"))
