"""Test doubles for the submit path: the Kubernetes API and the Ray Jobs API."""

from __future__ import annotations

import base64
import copy
import json
from datetime import datetime, timedelta

from kubernetes import client as k8s

ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
"""Kueue's annotation of an elastic job, and the name of the scheduling gate its RayCluster webhook puts on it."""


class FakeCoreV1:
    """The CoreV1Api calls of the submit path, for a RayCluster ``c`` and its head service ``head-svc``.

    ``secrets``: name -> data (plain text values; served base64-encoded, as the
    API server does), or an int: the API server's error for reading it (403: not allowed).
    """

    api_client = None
    """What the submit path builds its other Kubernetes APIs from: ApiextensionsV1Api(None) makes its own, offline."""

    def __init__(self, pods, target_port=8265, secrets=None):
        self.pods = pods
        self.target_port = target_port
        self.secrets = dict(secrets or {})
        self.secret_reads: list[tuple[str, str]] = []

    def read_namespaced_service(self, name, namespace):
        if name != "head-svc":
            raise api_error(not_found("", "services", name))
        return k8s.V1Service(spec=k8s.V1ServiceSpec(
            selector={"ray.io/node-type": "head", "ray.io/cluster": "c"},
            ports=[k8s.V1ServicePort(port=6379), k8s.V1ServicePort(port=8265, target_port=self.target_port)],
        ))

    def read_namespaced_secret(self, name, namespace):
        self.secret_reads.append((namespace, name))
        found = self.secrets.get(name, 404)
        if found == 404:
            raise api_error(not_found("", "secrets", name))
        if found == 403:
            raise api_error(forbidden("", "secrets", name, f'User "someone@example.com" cannot get resource "secrets" '
                                                         f'in API group "" in the namespace "{namespace}"'))
        if isinstance(found, int):
            raise api_error(internal_error("etcdserver: request timed out"))
        return k8s.V1Secret(data={k: base64.b64encode(v.encode()).decode() for k, v in found.items()})

    def list_namespaced_pod(self, namespace, label_selector):
        assert label_selector == "ray.io/cluster=c,ray.io/node-type=head"
        return k8s.V1PodList(items=self.pods)

    def connect_get_namespaced_pod_portforward(self, *args, **kwargs):
        raise NotImplementedError("a websocket to an API server; tests replace kubernetes.stream.portforward")


def pod(name, phase="Running", ready="True"):
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(
            name="ray-head", ports=[k8s.V1ContainerPort(container_port=8265, name="dashboard")])]),
        status=k8s.V1PodStatus(phase=phase, conditions=[k8s.V1PodCondition(type="Ready", status=ready)]),
    )


class FakeJobsClient:
    """The JobSubmissionClient calls of the submit command, against an in-memory cluster.

    ``jobs``: submission id -> status of the jobs already there. A submitted job
    ends with ``final`` and its log is ``log``; a running job ends (``final``)
    when its log stream does. ``fail`` makes every call raise
    ``error`` that many times before it answers (a flaky port-forward);
    ``drop_stream`` makes the first log stream break after that many chunks.
    ``lose_submit_response`` makes the first submit create the job and still
    fail, as when the connection drops after the dashboard accepted the POST.
    """

    SUBMITTED_MS = 1_796_000_000_000

    def __init__(self, jobs=None, *, final="SUCCEEDED", log="", fail=0, error=None,
                 drop_stream=None, lose_submit_response=False, message=""):
        import requests

        self.jobs = dict(jobs or {})
        self.final = final
        self.log = log
        self.fail = fail
        self.error = error or requests.ConnectionError("('Connection aborted.', ConnectionResetError(104))")
        self.drop_stream = drop_stream
        self.lose_submit_response = lose_submit_response
        self.message = message
        self.calls: dict[str, int] = {}
        self.submitted: list[dict] = []
        self.stopped: list[str] = []
        self.streams = 0

    def _call(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.calls[name] <= self.fail:
            raise self.error

    def list_jobs(self):
        from types import SimpleNamespace

        from ray.job_submission import JobStatus

        self._call("list_jobs")
        # Ray's start time orders a run's jobs: here, the order they were added.
        return [SimpleNamespace(submission_id=sid, status=JobStatus(s), start_time=1000 * n)
                for n, (sid, s) in enumerate(self.jobs.items(), start=1)]

    def get_job_status(self, sid):
        from ray.job_submission import JobStatus

        self._call("get_job_status")
        if sid not in self.jobs:
            raise RuntimeError(f"Request failed with status code 404: Job {sid} does not exist.")
        return JobStatus(self.jobs[sid])

    def submit_job(self, *, entrypoint, submission_id, runtime_env, metadata):
        self._call("submit_job")
        if submission_id in self.jobs:
            raise RuntimeError(
                f"Request failed with status code 400: Job with submission_id {submission_id} already exists. "
                "Please use a different submission_id."
            )
        self.jobs[submission_id] = self.final
        self.submitted.append(dict(submission_id=submission_id, entrypoint=entrypoint, metadata=metadata,
                                   runtime_env=runtime_env))
        if self.lose_submit_response:
            self.lose_submit_response = False
            raise ConnectionResetError(104, "Connection reset by peer")
        return submission_id

    def stop_job(self, sid):
        self._call("stop_job")
        self.stopped.append(sid)
        self.jobs[sid] = "STOPPED"
        return True

    def get_job_logs(self, sid):
        self._call("get_job_logs")
        return self.log

    def get_job_info(self, sid):
        from types import SimpleNamespace

        self._call("get_job_info")
        status = self.jobs.get(sid, "PENDING")
        # Ray's times are epoch milliseconds; a job of this fake runs for a minute.
        ended = None if status in ("PENDING", "RUNNING") else self.SUBMITTED_MS + 60_000
        return SimpleNamespace(message=self.message, status=status, start_time=self.SUBMITTED_MS, end_time=ended)

    async def tail_job_logs(self, sid):
        self._call("tail_job_logs")
        self.streams += 1
        chunks = [line + "\n" for line in self.log.split("\n")] if self.log else []
        for i, chunk in enumerate(chunks):
            if self.streams == 1 and i == self.drop_stream:
                raise RuntimeError("WebSocket connection closed unexpectedly with close code 1006")
            yield chunk
        if self.jobs.get(sid) in ("PENDING", "RUNNING"):
            self.jobs[sid] = self.final


# --- The API server's errors --------------------------------------------------------------------------------------
# A fake answers as the API server does: a metav1.Status built by apimachinery's constructors
# (k8s.io/apimachinery v0.35, pkg/api/errors/errors.go: NewNotFound, NewAlreadyExists, NewForbidden, NewUnauthorized,
# NewConflict, NewInvalid, NewInternalError; a webhook's denial: k8s.io/apiserver
# pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr), sent with its code, and raised as the Python
# client raises it from that response (ApiException.from_response: the class per code, ``reason`` the status line's
# reason phrase, ``body`` the Status as JSON). tests/test_fake_api_errors.py holds these to apimachinery's own tests.

HTTP_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
                422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
                503: "Service Unavailable"}
"""Go's ``http.StatusText``: the reason phrase of the API server's status line, the client's ``ApiException.reason``."""
FIELD_ERRORS = {"FieldValueNotFound": "Not found", "FieldValueRequired": "Required value",
                "FieldValueDuplicate": "Duplicate value", "FieldValueInvalid": "Invalid value",
                "FieldValueNotSupported": "Unsupported value", "FieldValueForbidden": "Forbidden"}
"""``field.ErrorType`` and its ``String()`` (pkg/util/validation/field/errors.go)."""
NO_VALUE = ("FieldValueRequired", "FieldValueForbidden")
"""The field error types whose body names no value (``ErrorBody``)."""


def _status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    """A failure's ``metav1.Status`` as JSON: empty fields left out (``omitempty``)."""
    status = {"status": "Failure", "message": message, "reason": reason, "code": code}
    if details is not None:
        status["details"] = {k: v for k, v in details.items() if v not in ("", None, [])}
    return status


def _qualified(group: str, name: str) -> str:
    """``schema.GroupResource.String()`` / ``GroupKind.String()``: ``rayjobs.ray.io``, or ``pods`` in the core group."""
    return f"{name}.{group}" if group else name


def not_found(group: str, resource: str, name: str) -> dict:
    return _status(404, "NotFound", f'{_qualified(group, resource)} "{name}" not found',
                   {"group": group, "kind": resource, "name": name})


def already_exists(group: str, resource: str, name: str) -> dict:
    return _status(409, "AlreadyExists", f'{_qualified(group, resource)} "{name}" already exists',
                   {"group": group, "kind": resource, "name": name})


def conflict(group: str, resource: str, name: str, err: str) -> dict:
    return _status(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(group, resource)} "{name}": {err}',
                   {"group": group, "kind": resource, "name": name})


def forbidden(group: str, resource: str, name: str, err: str) -> dict:
    if not resource:
        message = f"forbidden: {err}"
    elif not name:
        message = f"{_qualified(group, resource)} is forbidden: {err}"
    else:
        message = f'{_qualified(group, resource)} "{name}" is forbidden: {err}'
    return _status(403, "Forbidden", message, {"group": group, "kind": resource, "name": name})


def unauthorized(reason: str = "") -> dict:
    return _status(401, "Unauthorized", reason or "not authorized")


def internal_error(err: str) -> dict:
    return _status(500, "InternalError", f"Internal error occurred: {err}", {"causes": [{"message": err}]})


def field_error(kind: str, field: str, value=None, detail: str = "") -> dict:
    """A ``field.Error`` as its StatusCause: ``reason`` its type, ``message`` its ``ErrorBody()``."""
    body = FIELD_ERRORS[kind]
    if kind not in NO_VALUE:
        if isinstance(value, str):
            body += f": {json.dumps(value)}"
        elif isinstance(value, (bool, int, float)):
            body += f": {str(value).lower() if isinstance(value, bool) else value}"
        else:
            body += f": {json.dumps(value, separators=(',', ':'))}"
    if detail:
        body += f": {detail}"
    return {"reason": kind, "message": body, "field": field}


def invalid(group: str, kind: str, name: str, causes: list[dict]) -> dict:
    """``NewInvalid``: the causes, and the message of their aggregate (one: itself; more: in brackets)."""
    errors = list(dict.fromkeys(f"{c['field']}: {c['message']}" for c in causes))
    message = f'{_qualified(group, kind)} "{name}" is invalid'
    if errors:
        message += ": " + (errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
    return _status(422, "Invalid", message, {"group": group, "kind": kind, "name": name, "causes": causes})


def webhook_denied(webhook: str, result: dict | None) -> dict:
    """``ToStatusErr``: the webhook's Status with a code of at least 400, ``Failure``, and who denied it."""
    status = dict(result or {"status": "Failure"})
    denied_by = f'admission webhook "{webhook}" denied the request'
    if (status.get("code") or 0) < 400:
        status["code"] = 400
    if status.get("status") in (None, "", "Success"):
        status["status"] = "Failure"
    if status.get("message"):
        status["message"] = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        status["message"] = f"{denied_by}: {status['reason']}"
    else:
        status["message"] = f"{denied_by} without explanation"
    return status


class _Response:
    """What ``ApiException.from_response`` reads of an HTTP response."""

    def __init__(self, status: dict):
        self.status = status["code"]
        self.reason = HTTP_REASONS.get(self.status, "")
        self.data = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, **status}).encode()
        self.headers = {"Content-Type": "application/json"}


def api_error(status: dict) -> k8s.ApiException:
    """The exception the Python client raises for an API server's answer of ``status``."""
    response = _Response(status)
    try:
        k8s.ApiException.from_response(http_resp=response, body=response.data.decode(), data=None)
    except k8s.ApiException as error:
        return error
    raise AssertionError("ApiException.from_response returned")


def status_of(error: k8s.ApiException) -> dict:
    """The Status an ApiException carries in its body."""
    return json.loads(error.body)


REPLICA_INDEX_LABEL = "ray.io/worker-group-replica-index"
"""The slice (replica) a multi-host worker pod belongs to, as KubeRay >= 1.6 labels it."""
TERMINAL_JOB_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")
"""``rayv1.IsJobTerminal``."""
RAYJOBS = ("ray.io", "rayjobs")
"""The group and resource of RayJobs, as the API server's errors name them."""


class FakeKubeRay:
    """The Kubernetes API of a cluster with KubeRay (v1.7.0) and GKE's cluster autoscaler, for runs that bring their
    own RayCluster: ``core`` (CoreV1Api: pods, events, services, port-forward) and ``custom`` (CustomObjectsApi:
    RayJobs, validated as the API server validates them: tests/schemas.py, refused with its 422).

    Each read of a RayJob is ``seconds_per_read`` later. The world moves first: the RayCluster's pods come up, one
    per read (the head first), unless ``slices_never_come`` (no pod is ever scheduled; the scheduler and the cluster
    autoscaler say why in events) or ``slices_that_come`` (only that many slices' worker pods come up); an elastic
    run's pods wait for Kueue's scheduling gate (:meth:`ungate`); while its job runs, Ray's autoscaler raises an
    autoscaling group's ``replicas`` to ``maxReplicas`` after ``grows_after`` reads; a job nobody follows ends after
    ``ends_after[name]`` reads. Then KubeRay reconciles the RayJob until it has nothing left to do (it requeues every
    3 s, far more often than anyone polls).

    Its reconcile is KubeRay's for an HTTPMode RayJob that brings its cluster (``rayjob_controller.go`` at v1.7.0,
    :meth:`reconcile`, function by function), held to KubeRay's own tests in tests/test_fake_kuberay.py: New to
    Initializing (``initRayJobStatusIfNeed``: the job id, a new cluster name, the start time); in Initializing the
    suspend flag, ``activeDeadlineSeconds`` and ``preRunningDeadlineSeconds`` (counted from that start), then the
    cluster, created if missing, until it is ready; Running: the job posted to the head's Jobs API (``jobs``, a
    FakeJobsClient) when it does not know it, then its status, Complete or Failed once terminal (STOPPED is Complete,
    FAILED is Failed for AppFailed); a failure is retried on a new cluster while ``backoffLimit`` allows
    (``checkBackoffLimitAndUpdateStatusIfNeeded``: Retrying, then New; not for DeadlineExceeded), ``status.failed``
    counting every failed attempt; ``spec.suspend`` (Kueue's) turns Initializing or Running into Suspending, whose
    cluster is deleted before it is Suspended, and unsuspended it is New again; a finished RayJob's cluster is
    deleted ``ttlSecondsAfterFinished`` after its end where ``shutdownAfterJobFinishes``. A status change is stored
    only where ``updateRayJobStatus`` would store it. Once every pod is ready the RayCluster's state is ``ready`` and
    stays so (``calculateStatus`` never sets a ready cluster back): what Kueue reads as the run's pods being ready.

    Not modelled: K8sJobMode, SidecarMode and InteractiveMode (the stack submits in HTTPMode), ``clusterSelector``,
    ``deletionStrategy`` (behind the alpha RayJobDeletionPolicy gate), KubeRay's validation (``ValidationFailed``:
    ``gke_ray_tpu.core.kuberay.ray_job_problems`` holds what the stack's manifests must pass), the job-status-check
    timeout and the transition grace period (the Jobs API always answers here), ``rayJobInfo``, and a RayCluster
    status beyond its ``state``.
    """

    CREATED = "2026-12-04T06:00:00Z"

    def __init__(self, jobs: FakeJobsClient, *, slices_never_come: bool = False, seconds_per_read: int = 60,
                 slices_that_come: int | None = None, grows_after: int | None = None,
                 ends_after: dict[str, int] | None = None):
        self.jobs = jobs
        self.slices_never_come = slices_never_come
        self.slices_that_come = slices_that_come
        self.seconds_per_read = seconds_per_read
        """Seconds between two reads of a RayJob (the fake Kueue sets its own)."""
        self.grows_after = grows_after
        self.ends_after = dict(ends_after or {})
        self.ray_clusters: dict[str, dict] = {}
        """Each live RayCluster's spec, as the RayJob's (and, for an elastic run, Kueue's webhook) made it."""
        self.cluster_log: list[str] = []
        """Every RayCluster KubeRay created, in order."""
        self.ready_clusters: set[str] = set()
        """The RayClusters whose state is ``ready``."""
        self.running_reads: dict[str, int] = {}
        self.ray_jobs: dict[str, dict] = {}
        self.created: list[dict] = []
        """Every RayJob as it was created."""
        self.ages: dict[str, int] = {}
        """Reads of each RayJob since it was created: its clock (``seconds_per_read`` each)."""
        self.names: dict[str, int] = {}
        """Cluster names KubeRay has given each RayJob (``GenerateRayClusterName``, a random suffix: here numbered)."""
        self.history: dict[str, list[str]] = {}
        """Each RayJob's ``jobDeploymentStatus`` at every status update KubeRay stored ("" is New)."""
        self.pods: dict[str, k8s.V1Pod] = {}
        self.events: list[k8s.CoreV1Event] = []
        self.clusters: set[str] = set()
        self.services_read: list[str] = []
        self.secrets_read: list[str] = []
        self.reads = 0
        self.core = _FakeCore(self)
        self.custom = _FakeCustom(self)

    # --- the clock --------------------------------------------------------------------------------------------

    def _now(self, job: dict) -> int:
        """Seconds on the RayJob's clock: 0 at its first read, ``seconds_per_read`` more at each read after."""
        return max(0, self.ages.get(job["metadata"]["name"], 0) - 1) * self.seconds_per_read

    def _timestamp(self, job: dict) -> str:
        return (_parse(self.CREATED) + timedelta(seconds=self._now(job))).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _since(self, job: dict, field: str) -> int:
        return self._now(job) - int((_parse(job["status"][field]) - _parse(self.CREATED)).total_seconds())

    # --- one read -----------------------------------------------------------------------------------------------

    def advance(self, job: dict) -> None:
        """A read's worth of time for one RayJob: the world moves, then KubeRay reconciles until it rests."""
        from tests.schemas import validate_writes

        name = job["metadata"]["name"]
        self.ages[name] = self.ages.get(name, 0) + 1
        job.setdefault("status", {})
        self._world(job)
        for _ in range(20):
            before = copy.deepcopy(job["status"])
            acted = self.reconcile(job)
            if not acted and job["status"] == before:
                break
        else:
            raise AssertionError(f"KubeRay's reconcile of {name} never rests: {job['status']}")
        validate_writes(self, [job])

    def _world(self, job: dict) -> None:
        """Between two reads: the RayCluster's state as its controller saw the pods, then one pod up (or the
        scheduler's and the autoscaler's word on why none), Ray's autoscaler, and a job nobody follows ending."""
        name = job["metadata"]["name"]
        cluster = job["status"].get("rayClusterName") or ""
        if cluster not in self.ray_clusters:
            return
        pods = self._pods_of(cluster)
        if pods and all(p.status.phase == "Running" for p in pods):
            self.ready_clusters.add(cluster)
        running = job["status"].get("jobDeploymentStatus") == "Running"
        if running:
            self.running_reads[name] = self.running_reads.get(name, 0) + 1
            spec = self.ray_clusters[cluster]
            for group in spec["workerGroupSpecs"]:
                if (spec.get("enableInTreeAutoscaling") and self.grows_after is not None
                        and self.running_reads[name] >= self.grows_after and group["replicas"] < group["maxReplicas"]):
                    first, group["replicas"] = group["replicas"], group["maxReplicas"]
                    self._worker_pods(cluster, group, first)
        pending = [p for p in self._pods_of(cluster) if p.status.phase == "Pending" and not p.spec.scheduling_gates]
        coming = [] if self.slices_never_come else [p for p in pending if self._comes(p)]
        if coming:
            _run(min(coming, key=lambda p: (p.metadata.labels["ray.io/node-type"] != "head", p.metadata.name)))
        elif pending:
            self._unschedulable(cluster)
        if running and name in self.ends_after and self.running_reads[name] >= self.ends_after[name]:
            self.jobs.jobs[job["spec"]["jobId"]] = "SUCCEEDED"

    # --- KubeRay's reconcile (rayjob_controller.go, v1.7.0) ---------------------------------------------------

    def reconcile(self, job: dict) -> bool:
        """One pass of ``RayJobReconciler.Reconcile``; True where it acted beyond the RayJob's status (a cluster
        created or deleted, the job posted)."""
        spec, status = job["spec"], job["status"]
        original = copy.deepcopy(status)
        state = status.get("jobDeploymentStatus", "")
        acted = False
        if state == "":
            self._init_status(job)
        elif state == "Initializing":
            if not (self._to_suspending(job) or self._active_deadline(job) or self._pre_running_deadline(job)):
                acted = self._get_or_create_cluster(job)
                if status["rayClusterName"] not in self.ready_clusters:
                    status["rayClusterStatus"] = {}
                else:
                    status["dashboardURL"] = f"{status['rayClusterName']}-head-svc.{job['metadata']['namespace']}.svc.cluster.local:8265"
                    status["jobDeploymentStatus"] = "Running"
        elif state == "Running":
            if not (self._to_suspending(job) or self._active_deadline(job)):
                acted = self._get_or_create_cluster(job)
                ray_status = self.jobs.jobs.get(status["jobId"])
                if ray_status is None:  # GetJobInfo: not found; HTTPMode posts it (reconcileHTTPModeJobNotFound)
                    self.jobs.jobs[status["jobId"]] = "RUNNING"
                    self.jobs.submitted.append(dict(submission_id=status["jobId"], entrypoint=spec["entrypoint"],
                                                    runtime_env_yaml=spec["runtimeEnvYAML"],
                                                    cluster=status["rayClusterName"]))
                    acted = True
                else:
                    deployment, reason = "Running", ""
                    if ray_status in TERMINAL_JOB_STATUSES:
                        deployment, reason = ("Failed", "AppFailed") if ray_status == "FAILED" else ("Complete", "")
                    status.update(rayClusterStatus=self._cluster_status(status["rayClusterName"]), jobStatus=ray_status,
                                  jobDeploymentStatus=deployment)
                    _set(status, "reason", reason)
                    _set(status, "message", self.jobs.message)
        elif state in ("Suspending", "Retrying"):
            if not self._delete_cluster_resources(job):
                return True  # the deletion is under way: KubeRay requeues
            if state == "Retrying":  # the new cluster's Jobs API has not seen the job
                self.jobs.jobs.pop(status.get("jobId"), None)
            for field in ("rayClusterName", "dashboardURL", "jobId", "message", "reason", "jobStatus"):
                status.pop(field, None)
            status["rayClusterStatus"] = {}
            status["jobDeploymentStatus"] = "Suspended" if state == "Suspending" else ""
        elif state == "Suspended":
            if spec.get("suspend"):
                return False  # already suspended: no requeue
            status.pop("jobStatus", None)
            status["jobDeploymentStatus"] = ""
        elif state in ("Complete", "Failed"):  # handleShutdownAfterJobFinishes; no status update, no retry
            if spec.get("shutdownAfterJobFinishes") and \
                    self._since(job, "endTime") >= spec.get("ttlSecondsAfterFinished", 0):
                return not self._delete_cluster_resources(job)
            return False
        self._check_backoff_limit(job)
        self._update_status(job, original)
        return acted

    def _init_status(self, job: dict) -> None:
        """``initRayJobStatusIfNeed``: the job id (HTTPMode: ``spec.jobId``), a new cluster name, the start."""
        spec, status = job["spec"], job["status"]
        status.setdefault("jobId", spec["jobId"])
        if not status.get("rayClusterName"):
            name = job["metadata"]["name"]
            count = self.names.get(name, 0)
            self.names[name] = count + 1
            status["rayClusterName"] = f"{name}-x7k2p{count or ''}"
        status["jobDeploymentStatus"] = "Initializing"
        status["startTime"] = self._timestamp(job)

    @staticmethod
    def _to_suspending(job: dict) -> bool:
        """``updateStatusToSuspendingIfNeeded``: a suspended RayJob that is Initializing or Running."""
        if not job["spec"].get("suspend") or job["status"].get("jobDeploymentStatus") not in ("Running", "Initializing"):
            return False
        job["status"]["jobDeploymentStatus"] = "Suspending"
        return True

    def _active_deadline(self, job: dict) -> bool:
        """``checkActiveDeadlineAndUpdateStatusIfNeeded``: Failed, DeadlineExceeded (never retried)."""
        return self._deadline(job, "activeDeadlineSeconds", "DeadlineExceeded")

    def _pre_running_deadline(self, job: dict) -> bool:
        """``checkPreRunningDeadlineAndUpdateStatusIfNeeded``: Failed, PreRunningDeadlineExceeded (retried)."""
        return self._deadline(job, "preRunningDeadlineSeconds", "PreRunningDeadlineExceeded")

    def _deadline(self, job: dict, field: str, reason: str) -> bool:
        seconds = job["spec"].get(field)
        if seconds is None or self._since(job, "startTime") < seconds:
            return False
        started = _parse(job["status"]["startTime"]).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
        job["status"].update(jobDeploymentStatus="Failed", reason=reason,
                             message=f"The RayJob has passed the {field}. StartTime: {started}. "
                                     f"{field[0].upper()}{field[1:]}: {seconds}")
        return True

    @staticmethod
    def _check_backoff_limit(job: dict) -> None:
        """``checkBackoffLimitAndUpdateStatusIfNeeded``: count the attempt's end; a failure is Retrying while
        ``failed < backoffLimit + 1``, unless the deadline or the status checks ran out."""
        spec, status = job["spec"], job["status"]
        failed, succeeded = status.get("failed") or 0, status.get("succeeded") or 0
        if status.get("jobDeploymentStatus") == "Failed":
            failed += 1
        if status.get("jobStatus") == "SUCCEEDED" and status.get("jobDeploymentStatus") == "Complete":
            succeeded += 1
        status.update(failed=failed, succeeded=succeeded)
        limit = spec.get("backoffLimit")
        if status.get("jobDeploymentStatus") == "Failed" and limit is not None and failed < limit + 1 \
                and status.get("reason") not in ("DeadlineExceeded", "JobStatusCheckTimeoutExceeded"):
            status["jobDeploymentStatus"] = "Retrying"

    def _update_status(self, job: dict, original: dict) -> None:
        """``updateRayJobStatus``: stored only if the job or deployment status or the cluster's status changed; the
        end time on a change to Complete or Failed. Otherwise what this pass wrote is lost."""
        status = job["status"]
        changed = any(original.get(k, "") != status.get(k, "") for k in ("jobStatus", "jobDeploymentStatus")) or \
            original.get("rayClusterStatus", {}) != status.get("rayClusterStatus", {})
        if not changed:
            job["status"] = original
            return
        if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
            status["endTime"] = self._timestamp(job)
        self.history.setdefault(job["metadata"]["name"], []).append(status.get("jobDeploymentStatus", ""))

    def _get_or_create_cluster(self, job: dict) -> bool:
        """``getOrCreateRayClusterInstance``: the RayJob's RayCluster, created if missing (True: created)."""
        cluster = job["status"]["rayClusterName"]
        if cluster in self.ray_clusters:
            return False
        self._create_cluster(job, cluster)
        return True

    def _delete_cluster_resources(self, job: dict) -> bool:
        """``deleteClusterResources``: True once the cluster is gone; the first call deletes it (its pods go with
        it, by their owner reference) and says it is not gone yet."""
        cluster = job["status"].get("rayClusterName") or ""
        if cluster not in self.ray_clusters:
            return True
        self.clusters.discard(cluster)
        self.ray_clusters.pop(cluster, None)
        self.ready_clusters.discard(cluster)
        for pod_name in [n for n, p in self.pods.items() if p.metadata.labels["ray.io/cluster"] == cluster]:
            del self.pods[pod_name]
        return False

    def _cluster_status(self, cluster: str) -> dict:
        return {"state": "ready"} if cluster in self.ready_clusters else {}

    # --- the RayCluster and its pods ----------------------------------------------------------------------------

    def _create_cluster(self, job: dict, cluster: str) -> None:
        """KubeRay's RayCluster for the RayJob (``constructRayClusterForRayJob``; an elastic one gated by Kueue's
        webhook), validated as the API server would take it, and its pods."""
        from tests.schemas import validate_ray_cluster

        spec = copy.deepcopy(job["spec"]["rayClusterSpec"])
        if (job["metadata"].get("annotations") or {}).get(ELASTIC_JOB_ANNOTATION) == "true":
            for template in [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]:
                template["spec"]["schedulingGates"] = [{"name": ELASTIC_JOB_ANNOTATION}]
        validate_ray_cluster({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                              "metadata": {"name": cluster, "namespace": job["metadata"]["namespace"],
                                           "labels": {**(job["metadata"].get("labels") or {}),
                                                      "ray.io/originated-from-cr-name": job["metadata"]["name"],
                                                      "ray.io/originated-from-crd": "RayJob"}},
                              "spec": spec})
        self.ray_clusters[cluster] = spec
        self.cluster_log.append(cluster)
        self.clusters.add(cluster)
        self._pod(cluster, f"{cluster}-head", "head", gated=self._gated(spec["headGroupSpec"]))
        for group in spec["workerGroupSpecs"]:
            self._worker_pods(cluster, group, 0)

    def _worker_pods(self, cluster: str, group: dict, first_replica: int) -> None:
        for host in range(first_replica * group["numOfHosts"], group["replicas"] * group["numOfHosts"]):
            self._pod(cluster, f"{cluster}-{group['groupName']}-worker-{host}", "worker",
                      replica=host // group["numOfHosts"], gated=self._gated(group))

    @staticmethod
    def _gated(group: dict) -> bool:
        return bool(group["template"]["spec"].get("schedulingGates"))

    def ungate(self, cluster: str, group_name: str, count: int) -> None:
        """Kueue's ungater: the first ``count`` pods of a group (the head's group: ``headgroup``) may schedule."""
        pods = sorted((p for p in self._pods_of(cluster) if p.metadata.labels.get("ray.io/group") == group_name),
                      key=lambda p: p.metadata.name)
        for pod in pods[:count]:
            pod.spec.scheduling_gates = None

    def _comes(self, pod: k8s.V1Pod) -> bool:
        labels = pod.metadata.labels
        if labels["ray.io/node-type"] == "head" or self.slices_that_come is None:
            return True
        return int(labels[REPLICA_INDEX_LABEL]) < self.slices_that_come

    def _pod(self, cluster: str, name: str, node_type: str, replica: int | None = None, gated: bool = False) -> None:
        labels = {"ray.io/cluster": cluster, "ray.io/node-type": node_type,
                  "ray.io/group": "headgroup" if node_type == "head" else name.split("-worker-")[0][len(cluster) + 1:]}
        if replica is not None:
            labels[REPLICA_INDEX_LABEL] = str(replica)
        gates = [k8s.V1PodSchedulingGate(name=ELASTIC_JOB_ANNOTATION)] if gated else None
        self.pods[name] = k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name=name, labels=labels),
            spec=k8s.V1PodSpec(containers=[k8s.V1Container(
                name="ray-head", ports=[k8s.V1ContainerPort(container_port=8265, name="dashboard")])],
                scheduling_gates=gates),
            status=k8s.V1PodStatus(phase="Pending", conditions=[k8s.V1PodCondition(type="Ready", status="False")]),
        )

    def _pods_of(self, cluster: str) -> list:
        return [p for p in self.pods.values() if p.metadata.labels["ray.io/cluster"] == cluster]

    def _unschedulable(self, cluster: str) -> None:
        first = sorted(p.metadata.name for p in self._pods_of(cluster) if "worker" in p.metadata.name
                       and p.status.phase == "Pending" and not p.spec.scheduling_gates)[0]
        said = {
            "FailedScheduling": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
                                "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
            "NotTriggerScaleUp": "pod didn't trigger scale-up: 1 max node group size reached, "
                                 "1 in backoff after failed scale-up (out of resources: GCE quota exceeded)",
        }
        for reason, message in said.items():
            seen = [e for e in self.events if e.reason == reason and e.involved_object.name == first]
            if seen:  # Kubernetes counts a repeated event rather than adding one
                seen[0].count += 1
                continue
            self.events.append(k8s.CoreV1Event(
                metadata=k8s.V1ObjectMeta(name=f"{first}.{len(self.events)}"), reason=reason, message=message,
                count=1, type="Warning", involved_object=k8s.V1ObjectReference(kind="Pod", name=first),
                last_timestamp=f"2026-12-04T06:{len(self.events):02d}:00Z",
            ))


def _run(pod: k8s.V1Pod) -> None:
    pod.status = k8s.V1PodStatus(phase="Running", conditions=[k8s.V1PodCondition(type="Ready", status="True")])


def _parse(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def _set(status: dict, field: str, value: str) -> None:
    """A string field of a Go status struct: left out of its JSON when empty (``omitempty``)."""
    if value:
        status[field] = value
    else:
        status.pop(field, None)


class _FakeCustom:
    def __init__(self, kube: FakeKubeRay):
        self.kube = kube

    def _check(self, group, version, plural):
        assert (group, version, plural) == ("ray.io", "v1", "rayjobs")

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        """The API server's create: its validation of the CRD (422 Invalid) and a name taken (409 AlreadyExists)."""
        import jsonschema

        from tests.schemas import Refused, validate_ray_job, validate_writes

        self._check(group, version, plural)
        name = body["metadata"]["name"]
        try:
            validate_ray_job(body)
        except Refused as e:  # the CRD's CEL rules: a cause per rule
            causes = [field_error("FieldValueInvalid", v.field, v.rule.type, v.detail) for v in e.violations]
            raise api_error(invalid("ray.io", "RayJob", name, causes)) from None
        except jsonschema.ValidationError as e:  # its schema
            where = ".".join(str(step) for step in e.absolute_path) or "<nil>"
            raise api_error(invalid("ray.io", "RayJob", name, [field_error("FieldValueInvalid", where, e.instance,
                                                                            e.message)])) from None
        if name in self.kube.ray_jobs:
            raise api_error(already_exists(*RAYJOBS, name))
        self.kube.created.append(copy.deepcopy(body))
        job = copy.deepcopy(body)
        job["metadata"]["creationTimestamp"] = FakeKubeRay.CREATED
        self.kube.ray_jobs[name] = job
        validate_writes(self.kube, [job])
        return job

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self._check(group, version, plural)
        if name not in self.kube.ray_jobs:
            raise api_error(not_found(*RAYJOBS, name))
        self.kube.reads += 1
        self.kube.advance(self.kube.ray_jobs[name])
        return self.kube.ray_jobs[name]

    def list_namespaced_custom_object(self, group, version, namespace, plural):
        self._check(group, version, plural)
        return {"items": list(self.kube.ray_jobs.values())}


class _FakeCore:
    api_client = None

    def __init__(self, kube: FakeKubeRay):
        self.kube = kube

    def read_namespaced_service(self, name, namespace):
        self.kube.services_read.append(name)
        cluster = name.removesuffix("-head-svc")
        if cluster not in self.kube.clusters:
            raise api_error(not_found("", "services", name))
        return k8s.V1Service(spec=k8s.V1ServiceSpec(
            selector={"ray.io/cluster": cluster, "ray.io/node-type": "head"},
            ports=[k8s.V1ServicePort(port=8265, target_port="dashboard")],
        ))

    def read_namespaced_secret(self, name, namespace):
        """The token Secret KubeRay makes for each cluster with token auth (gke_ray_tpu.core.kuberay.auth_secret_name)."""
        from gke_ray_tpu.core.kuberay import AUTH_TOKEN_KEY, auth_secret_name

        self.kube.secrets_read.append(name)
        for cluster in self.kube.clusters:
            if auth_secret_name(cluster) == name:
                token = base64.b64encode(f"token-of-{cluster}".encode()).decode()
                return k8s.V1Secret(data={AUTH_TOKEN_KEY: token})
        raise api_error(not_found("", "secrets", name))

    def list_namespaced_pod(self, namespace, label_selector):
        wanted = dict(item.split("=") for item in label_selector.split(","))
        return k8s.V1PodList(items=[p for p in self.kube.pods.values()
                                    if wanted.items() <= p.metadata.labels.items()])

    def list_namespaced_event(self, namespace):
        return k8s.CoreV1EventList(items=list(self.kube.events))

    def connect_get_namespaced_pod_portforward(self, *args, **kwargs):
        raise NotImplementedError("a websocket to an API server; tests replace kubernetes.stream.portforward")
