"""Test doubles for the submit path: the Kubernetes API and the Ray Jobs API."""

from __future__ import annotations

import base64

from kubernetes import client as k8s


class FakeCoreV1:
    """The CoreV1Api calls of the submit path, for a RayCluster ``c`` and its head service ``head-svc``.

    ``secrets``: name -> data (plain text values; served base64-encoded, as the
    API server does), or an int: that status for reading it (403: not allowed).
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
            raise k8s.ApiException(status=404, reason="Not Found")
        return k8s.V1Service(spec=k8s.V1ServiceSpec(
            selector={"ray.io/node-type": "head", "ray.io/cluster": "c"},
            ports=[k8s.V1ServicePort(port=6379), k8s.V1ServicePort(port=8265, target_port=self.target_port)],
        ))

    def read_namespaced_secret(self, name, namespace):
        self.secret_reads.append((namespace, name))
        found = self.secrets.get(name, 404)
        if isinstance(found, int):
            raise k8s.ApiException(status=found, reason={403: "Forbidden", 404: "Not Found"}.get(found, "Error"))
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
