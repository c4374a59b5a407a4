"""Ray's token auth on a real local head: who gets to run code, and how the submit command gets in.

One head for the module, started while this process's environment holds a
caller's own Ray auth settings (auth disabled, another token, a token file):
the head must run with auth on and its own token anyway. Unauthenticated and
wrong-token job submissions, to the head's Jobs API and to the dashboard
agent's, are refused and run nothing; the submit command's client sends the
head's token, from ``$RAY_AUTH_TOKEN`` for ``--address`` and from a fake
Kubernetes API's Secret for a stack's cluster, and a refusal is one line.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import socket
import time
from pathlib import Path

import pytest
import requests

from gke_ray_tpu.core.kuberay import AUTH_TOKEN_KEY, auth_secret_name
from gke_ray_tpu.training import submit
from gke_ray_tpu.training.driver import cluster_checks, connection, port_forward, ray_auth
from gke_ray_tpu.training.driver.errors import ClusterError
from gke_ray_tpu.training.driver.jobs_client import JobsApi
from gke_ray_tpu.training.driver.local_ray import LEAN_RAY_ENV, TEMP_DIR_ENV, TPU_LOG_DIR_ENV, LocalRayHead
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.training.driver.stack_outputs import StackOutputs
from tests.fakes import FakeCoreV1, pod

CALLERS_TOKEN = "c" * 64
"""A token the caller's environment holds for some other cluster."""
SECRET = auth_secret_name("c")
"""The Secret KubeRay makes for the fakes' RayCluster ``c``."""


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    token_file = tmp_path_factory.mktemp("caller") / "auth_token"
    token_file.write_text(CALLERS_TOKEN)
    hostile = {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": CALLERS_TOKEN, "RAY_AUTH_TOKEN_PATH": str(token_file)}
    with pytest.MonkeyPatch.context() as env:
        for key, value in hostile.items():
            env.setenv(key, value)
        started = LocalRayHead(num_cpus=1, log_path=tmp_path_factory.mktemp("ray") / "ray-head.log").__enter__()
    try:
        yield started
    finally:
        started.__exit__(None, None, None)


def _job(marker: Path, sid: str) -> dict:
    return {"entrypoint": f"touch {marker}", "submission_id": sid}


def _wait_terminal(head: LocalRayHead, sid: str) -> str:
    client = head.jobs()
    deadline = time.monotonic() + 120
    while (status := str(client.get_job_status(sid).value)) not in ("SUCCEEDED", "FAILED", "STOPPED"):
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    return status


def _wait_for_agent(head: LocalRayHead) -> None:
    """The head is ready once its dashboard answers; its agent's HTTP server comes up a moment later."""
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(f"{head.agent_address}/api/local_raylet_healthz", timeout=5)
            return
        except requests.ConnectionError:
            assert time.monotonic() < deadline, "the dashboard agent never listened"
            time.sleep(0.5)


def test_job_submissions_without_the_token_are_refused_and_run_nothing(head, tmp_path):
    marker = tmp_path / "ran"
    _wait_for_agent(head)
    endpoints = {"jobs API": f"{head.address}/api/jobs/", "dashboard agent": f"{head.agent_address}/api/job_agent/jobs/"}
    answers = {}
    for where, url in endpoints.items():
        for name, headers in {"none": {}, "caller's": ray_auth.bearer(CALLERS_TOKEN),
                              "x-ray-authorization wrong": {"X-Ray-Authorization": f"Bearer {'0' * 64}"}}.items():
            sid = f"refused-{len(answers)}"
            answers[where, name] = requests.post(url, json=_job(marker, sid), headers=headers, timeout=30).status_code
    assert answers == {
        ("jobs API", "none"): 401, ("jobs API", "caller's"): 403, ("jobs API", "x-ray-authorization wrong"): 403,
        ("dashboard agent", "none"): 401, ("dashboard agent", "caller's"): 403,
        ("dashboard agent", "x-ray-authorization wrong"): 403,
    }
    assert requests.get(f"{head.address}/api/jobs/", timeout=30).status_code == 401  # nor may it list them

    # A job with the token runs, and once it has, nothing of the refused ones is there or has run.
    allowed = tmp_path / "allowed"
    assert requests.post(f"{head.address}/api/jobs/", json=_job(allowed, "allowed"), headers=head.headers,
                         timeout=30).status_code == 200
    assert _wait_terminal(head, "allowed") == "SUCCEEDED" and allowed.exists()
    assert [job.submission_id for job in head.jobs().list_jobs()] == ["allowed"]
    assert not marker.exists()


def test_the_head_keeps_its_token_out_of_command_lines(head):
    group = head._proc.pid
    lines = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if proc.name.isdigit() and os.getpgid(int(proc.name)) == group:
                lines.append((proc / "cmdline").read_bytes())
    assert len(lines) >= 3, lines  # ray start, the GCS, the raylet, the dashboard...
    assert not [line for line in lines if head.token.encode() in line]


def test_the_submit_client_sends_the_token_on_every_call_and_on_the_log_stream(head):
    client = connection.connect(head.address, "test", print, token=ray_auth.RayToken(head.token, "the test's head"))
    text: list[str] = []
    with JobsApi(client, print) as api:
        assert api.submit("streamed", "echo one; sleep 2; echo two", {}, {})
        api.follow("streamed", text.append)
        assert api.wait_terminal("streamed", timeout_s=60) == "SUCCEEDED"
        assert "one\n" in "".join(text) and "two\n" in "".join(text)

        client._headers = {}  # as if the cluster had been recreated with a new token: the stream is refused too
        with pytest.raises(ClusterError) as e:
            api.follow("streamed", text.append)
    assert str(e.value) == (
        "following the log of streamed: the Ray cluster now refuses the submit command's token (HTTP 401): the "
        "RayCluster may have been recreated with a new one; the job keeps running: run the same command again to "
        "follow it"
    )


def _submit_address(head, monkeypatch, token: str | None) -> tuple[int, list[str]]:
    if token is None:
        monkeypatch.delenv(ray_auth.ADDRESS_TOKEN_ENV, raising=False)
    else:
        monkeypatch.setenv(ray_auth.ADDRESS_TOKEN_ENV, token)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = submit.main(["--local", "--address", head.address, "run_name=pytest-auth-refused"])
    return rc, err.getvalue().strip().splitlines()


def test_address_without_a_token_or_with_a_wrong_one_is_one_line_and_exit_3(head, monkeypatch):
    rc, lines = _submit_address(head, monkeypatch, None)
    assert rc == 3 and not any("Traceback" in line for line in lines)
    assert lines[-1] == (
        f"python -m gke_ray_tpu.training.submit: error: the Ray Jobs API at {head.address} refused the submit command: the Ray "
        f"cluster answered 401: it runs with token auth and no token was sent (set RAY_AUTH_TOKEN to its token)"
    )
    rc, lines = _submit_address(head, monkeypatch, CALLERS_TOKEN)
    assert rc == 3
    assert lines[-1] == (
        f"python -m gke_ray_tpu.training.submit: error: the Ray Jobs API at {head.address} refused the submit command: the Ray "
        "cluster answered 403 to the token from $RAY_AUTH_TOKEN: not this cluster's token"
    )
    assert CALLERS_TOKEN not in "".join(lines)
    assert "pytest-auth-refused" not in str([job.submission_id for job in head.jobs().list_jobs()])


# --- a stack's cluster: the token from KubeRay's Secret, through a fake Kubernetes API -------------------------

OUTPUTS = StackOutputs.model_validate({
    "project": "my-tpu-project", "clusterName": "ray-tpu-multislice", "clusterLocation": "us-east5-b",
    "region": "us-central1", "namespace": "default", "bucketName": "b", "rayHeadService": "head-svc",
    "rayDashboardPort": 8265, "checkpointDir": "gs://b", "tpuGeneration": "v6e", "acceleratorType": "TPU-V6E",
    "topology": "4x4", "numSlices": 1, "hostsPerSlice": 4, "chipsPerHost": 4, "chipsPerSlice": 16,
    "elasticMinSlices": 1, "capacity": "on-demand", "scaleToZero": False,
})


@pytest.fixture
def kube(head, monkeypatch):
    """The cluster path's Kubernetes API: a fake CoreV1Api whose port-forward reaches the local head."""
    dashboard_port = int(head.address.rsplit(":", 1)[1])

    class Stream:
        def __init__(self, *args, ports):
            self.sock = socket.create_connection(("127.0.0.1", dashboard_port))

        def socket(self, port):
            return self.sock

    api = FakeCoreV1([pod("head-b")])
    monkeypatch.setattr("kubernetes.stream.portforward", Stream)
    monkeypatch.setattr(port_forward, "_core_api", lambda context, log=None: api)
    monkeypatch.setattr(cluster_checks, "check_kuberay", lambda extensions, log, own_clusters=False: None)  # test_gke_rules has it
    monkeypatch.delenv(ray_auth.ADDRESS_TOKEN_ENV, raising=False)
    return api


def _cluster_jobs(lines: list[str]) -> list[str]:
    with connection.job_client(SubmitRequest(outputs_file="outputs.json"), OUTPUTS, 1, lines.append) as client:
        return [job.submission_id for job in client.list_jobs()]


def test_the_cluster_path_reads_the_token_from_kuberays_secret(head, kube):
    kube.secrets[SECRET] = {AUTH_TOKEN_KEY: head.token}
    lines: list[str] = []
    assert _cluster_jobs(lines) == [job.submission_id for job in head.jobs().list_jobs()]
    assert kube.secret_reads == [("default", SECRET)]
    assert head.token not in "".join(lines)


@pytest.mark.parametrize("secret, message", [
    (404, f"Secret default/{SECRET} does not exist: KubeRay makes it for a RayCluster with authOptions.mode token; "
          "is RayCluster default/c deployed by this stack (`pulumi up`)?"),
    (403, f"cannot read Secret default/{SECRET} (403 Forbidden: secrets \"{SECRET}\" is forbidden: User "
          '"someone@example.com" cannot get resource "secrets" in API group "" in the namespace "default"): the submit '
          "command sends the Ray cluster's token "
          "from it; your Kubernetes user needs `get` on secrets in namespace default"),
    ({"other": "x"}, f"Secret default/{SECRET} has no 'auth_token' key: it is not the Secret KubeRay makes for "
                     "token auth"),
    ({AUTH_TOKEN_KEY: CALLERS_TOKEN}, f"the Ray Jobs API at http://127.0.0.1:PORT refused the submit command: the "
                                      f"Ray cluster answered 403 to the token from Secret default/{SECRET}: not this "
                                      "cluster's token"),
])
def test_a_secret_that_cannot_give_the_token_is_one_clear_line(head, kube, secret, message):
    kube.secrets[SECRET] = secret
    with pytest.raises(ClusterError) as e:
        _cluster_jobs([])
    text = str(e.value)
    assert "\n" not in text and CALLERS_TOKEN not in text and head.token not in text
    port = text.split("http://127.0.0.1:")[1].split(" ")[0] if "http://127.0.0.1:" in text else "PORT"
    assert text == message.replace("PORT", port)


def test_the_local_run_starts_its_own_head_with_token_auth_and_connects_with_its_token(tmp_path, monkeypatch):
    """``--local`` without ``--address`` (the embedded default), short of running MaxText."""
    monkeypatch.setenv(ray_auth.ADDRESS_TOKEN_ENV, CALLERS_TOKEN)  # the caller's, for some other cluster
    lines: list[str] = []
    with connection.job_client(SubmitRequest(local=True, output_dir=tmp_path), None, 1, lines.append) as client:
        assert client.list_jobs() == []
        address = client.get_address()
        assert requests.get(f"{address}/api/jobs/", timeout=30).status_code == 401
        assert requests.get(f"{address}/api/jobs/", headers=ray_auth.bearer(CALLERS_TOKEN), timeout=30).status_code == 403
    assert lines == [f"started a local Ray head: {address} (stopped when this command ends)"]


def test_the_heads_workers_find_their_own_cluster_without_an_address(head):
    """A Ray process that connects without an address (Ray Train's placement-group cleaner, in an actor) is told
    the head's; with two Ray instances on a machine (pytest's two workers) Ray would otherwise refuse to choose."""
    probe = ("import os, ray; ray.init(); "
             "print('task sees', ray.get(ray.remote(lambda: os.environ.get('RAY_ADDRESS')).remote()))")
    head.jobs().submit_job(entrypoint=f"python -c {shlex.quote(probe)}", submission_id="address-probe")
    assert _wait_terminal(head, "address-probe") == "SUCCEEDED", head.jobs().get_job_logs("address-probe")[-2000:]
    assert f"task sees {head.gcs_address}\n" in head.jobs().get_job_logs("address-probe")


_KINDS = ("log_monitor.py", "raylet/raylet", "dashboard/dashboard.py")


def _environments(head: LocalRayHead) -> dict[str, dict[str, str]]:
    """The environment the head's log monitor, raylet and dashboard (:data:`_KINDS`) were started with, by kind. Their
    command lines are their own, so their environment is what they were started with."""
    session = os.getsid(head._proc.pid)
    found = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and os.getsid(int(entry.name)) == session:
                command = (entry / "cmdline").read_bytes().decode(errors="replace")
                for kind in _KINDS:
                    if kind in command:
                        environ = (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                        found[kind] = dict(item.split("=", 1) for item in environ if "=" in item)
    assert set(found) == set(_KINDS), found.keys()
    return found


def _heads_own_folder(head: LocalRayHead, variable: str) -> Path:
    """The one folder ``variable`` names for all of :data:`_KINDS` (and so for the workers the raylet starts): an
    existing folder directly in the head's temp dir."""
    folders = {kind: Path(environ[variable]) for kind, environ in _environments(head).items()}
    [own] = set(folders.values())
    assert own.parent == Path(head._temp_dir) and own.is_dir(), folders
    return own


def test_the_heads_log_monitor_raylet_and_dashboard_run_with_the_lean_settings(head):
    """LEAN_RAY_ENV reaches the processes that read it: the log monitor (its glob interval), the raylet (its worker
    prestart, Ray's metrics, and the environment it starts the node's dashboard agent and workers with) and the
    dashboard (its own metrics)."""
    for kind, environ in _environments(head).items():
        assert LEAN_RAY_ENV.items() <= environ.items(), kind


def test_the_heads_ray_start_is_rays_command_line_without_serves_commands(head):
    """``ray start`` runs through ``training/driver/ray_start.py``, without Serve's command group, whose import loads
    pandas: its C extensions would be in the process's memory map, beside Ray's own core (the control)."""
    maps = Path(f"/proc/{head._proc.pid}/maps").read_text()
    assert "/ray/_raylet.so" in maps
    assert "/pandas/" not in maps


def test_the_heads_ray_links_and_publishes_a_libtpu_log_folder_of_its_own_not_the_machines(head):
    """Ray links the libtpu log folder into the node's log folder, and its log monitor publishes every file there to
    every driver: the machine's /tmp/tpu_logs unless TPU_LOG_DIR names another, so a compile check's libtpu logs,
    or an earlier run's, would reach each local job's log. The head's processes (and so its jobs') log libtpu to a
    folder of the head's own, and that is the one Ray links."""
    own = _heads_own_folder(head, TPU_LOG_DIR_ENV)
    linked = Path(head._temp_dir) / "session_latest" / "logs" / "tpu_logs"
    assert linked.is_symlink() and linked.resolve() == own.resolve(), (linked, linked.is_symlink() and os.readlink(linked))


def test_the_heads_processes_keep_their_temp_files_in_the_heads_folder_which_goes_with_it(head):
    """Ray's dashboard starts its modules from a multiprocessing forkserver, whose socket folder (pymp-*) is left in the
    temp folder however the head stops: one in /tmp per head, before. The head's processes (and so its jobs') take a
    temp folder in the head's own, which stop() removes."""
    own = _heads_own_folder(head, TEMP_DIR_ENV)
    assert list(own.glob("pymp-*/listener-*")), sorted(p.name for p in own.iterdir())  # the dashboard's forkserver
