"""Fail closed, on the right cluster: the submit command talks only to the stack's cluster (the kubeconfig's current
context must be it, unless --kube-context names one), ends within a bounded time with one line when the API
server refuses or never answers (the real Kubernetes client against sockets on 127.0.0.1), and holds the cluster's
KubeRay to the floor of every field the stack sets, as the stack's declared runs are at `pulumi up`."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from gke_ray_tpu.core import REPO_ROOT
from gke_ray_tpu.core.kuberay import served_rayjob_problems
from gke_ray_tpu.stack.mock_engine import MockGke, OfflineRun, run_offline
from gke_ray_tpu.training.driver import port_forward, retry
from gke_ray_tpu.training.driver.cluster_checks import check_kuberay
from gke_ray_tpu.training.driver.errors import ClusterError
from tests.conftest import STACK_CONTEXT, with_keys, write_kubeconfig
from tests.fakes import FakeJobsClient
from tests.schemas import RAYCLUSTER_CRD, RAYJOB_CRD
# run_dirs (autouse) and kube (the fake Kubernetes API) come with the module that tests the own-cluster path.
from tests.test_training_submit import STEPS_LOG, run_cli, write
from tests.test_training_submit_run_cluster import kube, per_run_outputs, run_dirs  # noqa: F401

PROG = "python -m gke_ray_tpu.training.submit: error: "


# --- the stack's cluster, or the one named ---------------------------------------------------------------------

def test_a_kubeconfig_pointing_at_another_cluster_is_refused_in_one_line_naming_both(capsys, tmp_path, kubeconfig,
                                                                                     per_run_outputs, kube):
    fake = kube(FakeJobsClient(log=STEPS_LOG))
    write_kubeconfig(kubeconfig, current="gke_other-project_us-central1-a_shared")
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "run_name=elsewhere")
    assert rc == 3 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        f"{PROG}the kubeconfig's current context gke_other-project_us-central1-a_shared (cluster "
        f"gke_other-project_us-central1-a_shared) is not the stack's cluster ray-tpu-multislice ({STACK_CONTEXT}): run "
        "`gcloud container clusters get-credentials ray-tpu-multislice --location us-east5-b --project my-tpu-project`,"
        " or pass --kube-context to name the context to use")
    assert fake.created == [] and kube.holder["bucket"].objects == {}  # nothing made, nothing uploaded


def test_kube_context_names_the_context_to_use(capsys, tmp_path, kubeconfig, per_run_outputs, kube, monkeypatch):
    fake = kube(FakeJobsClient(log=STEPS_LOG))
    write_kubeconfig(kubeconfig, current="gke_other-project_us-central1-a_shared")
    used: list = []
    monkeypatch.setattr(port_forward, "kube_apis", lambda context, log=None: used.append(context) or
                        (fake.core, fake.custom))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "--kube-context", "tpu-admin",
                      "run_name=named")
    assert rc == 0, err
    assert used == ["tpu-admin"] and [job["metadata"]["name"] for job in fake.created] == ["maxtext-named"]


def test_a_held_stack_is_held_to_its_cluster_too(capsys, tmp_path, kubeconfig, dev_run):
    write_kubeconfig(kubeconfig, current="minikube")
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dict(dev_run.outputs)), "run_name=held")
    assert rc == 3 and err.splitlines()[-1].startswith(f"{PROG}the kubeconfig's current context minikube")


def test_no_kubeconfig_is_one_line(capsys, tmp_path, monkeypatch, per_run_outputs):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "run_name=none")
    assert rc == 3 and err.count("\n") == 1 and err.startswith(f"{PROG}no usable kubeconfig")
    assert "gcloud container clusters get-credentials ray-tpu-multislice" in err


# --- an API server that refuses, or never answers ----------------------------------------------------------------

@pytest.fixture
def backoff(monkeypatch) -> list[float]:
    """The bounded retries of a call that did not reach the API server: their waits, recorded, not slept."""
    slept: list[float] = []
    monkeypatch.setattr(port_forward, "API_BACKOFF", retry.Backoff(retries=3, first_s=1.0, cap_s=4.0,
                                                                    sleep=slept.append))
    return slept


def run_bounded(capsys, argv: list[str], limit_s: float = 120) -> tuple[int, str]:
    """The command in a thread, which must end within ``limit_s`` (it would hang on an unbounded call)."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(zip(("rc", "err"), run_cli(capsys, *argv))), daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"the command did not end within {limit_s} s"
    return result["rc"], result["err"]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_api_server_that_refuses_connections_ends_the_command_with_one_line(capsys, tmp_path, kubeconfig,
                                                                              per_run_outputs, backoff):
    port = closed_port()
    write_kubeconfig(kubeconfig, server=f"http://127.0.0.1:{port}")
    rc, err = run_bounded(capsys, ["--outputs-file", write(tmp_path, per_run_outputs), "run_name=refused"])
    assert rc == 3 and "Traceback" not in err, err
    last = err.splitlines()[-1]
    assert last.startswith(f"{PROG}the Kubernetes API server at http://127.0.0.1:{port} did not answer: ")
    assert "Connection refused" in last and last.endswith("(still failing after 3 retries over 7 s)")
    assert backoff == [1.0, 2.0, 4.0]


def test_an_api_server_that_never_answers_ends_the_command_within_its_timeouts(capsys, tmp_path, kubeconfig,
                                                                               per_run_outputs, backoff, monkeypatch):
    monkeypatch.setattr(port_forward, "READ_TIMEOUT_S", 0.5)
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept_and_say_nothing():
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    write_kubeconfig(kubeconfig, server=f"http://127.0.0.1:{silent.getsockname()[1]}")
    try:
        rc, err = run_bounded(capsys, ["--outputs-file", write(tmp_path, per_run_outputs), "run_name=silent"])
    finally:
        silent.close()
        for connection in held:
            connection.close()
    assert rc == 3 and "Traceback" not in err, err
    last = err.splitlines()[-1]
    assert "did not answer" in last and "Read timed out. (read timeout=0.5)" in last
    assert len(held) == 4  # one try and 3 retries, each cut by the read timeout


# --- the KubeRay floor ---------------------------------------------------------------------------------------------

def kuberay_15_rayjob_crd() -> dict:
    """The vendored RayJob CRD without preRunningDeadlineSeconds, as KubeRay 1.5 served it."""
    crd = json.loads(RAYJOB_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["preRunningDeadlineSeconds"]
    return crd


class ServedCrds:
    def __init__(self, **crds):
        self.crds, self.read = crds, []

    def read_custom_resource_definition(self, name):
        self.read.append(name)
        return self.crds[name]


def test_a_run_that_brings_its_cluster_needs_the_rayjob_crd_with_its_deadline():
    current = {"rayclusters.ray.io": json.loads(RAYCLUSTER_CRD.read_text()), "rayjobs.ray.io": json.loads(RAYJOB_CRD.read_text())}
    assert served_rayjob_problems(current["rayjobs.ray.io"]) == []
    served = ServedCrds(**current)
    check_kuberay(served, [].append, own_clusters=True)
    assert served.read == ["rayclusters.ray.io", "rayjobs.ray.io"]
    old = ServedCrds(**{**current, "rayjobs.ray.io": kuberay_15_rayjob_crd()})
    with pytest.raises(ClusterError, match=r"its rayjobs\.ray\.io CRD has no preRunningDeadlineSeconds, so its KubeRay "
                                           r"is older than 1\.6\.0 .* Ray operator add-on runs KubeRay >= 1\.6\.0"):
        check_kuberay(old, [].append, own_clusters=True)
    check_kuberay(ServedCrds(**{**current, "rayjobs.ray.io": kuberay_15_rayjob_crd()}), [].append)  # a held stack: 1.5.1


def test_declared_runs_wait_for_the_served_crds_and_an_old_kuberay_fails_pulumi_up(dev_config):
    old = {**kuberay_15_rayjob_crd()["spec"]}
    queued = with_keys(dev_config, capacity="flex-start")
    run = OfflineRun()
    # Raised where the engine resolves the read: one line naming the key behind the cluster's KubeRay.
    with pytest.raises(ValueError, match=r"invalid config gke-ray-tpu:clusterVersion='1\.35': expected a cluster whose "
                                         r"Ray operator add-on runs KubeRay >= 1\.6\.0: its rayjobs\.ray\.io CRD has no "
                                         r"preRunningDeadlineSeconds"):
        run_offline(queued, run=run, gke=MockGke(served_rayjob_crd=old))
    assert run.of_type("kubernetes:ray.io/v1:RayJob") == []  # never created
    # A stack that holds its RayCluster sets no deadline: its floor is 1.5.1.
    held = run_offline(dev_config, gke=MockGke(served_rayjob_crd=copy.deepcopy(old)))
    assert held.of_type("kubernetes:ray.io/v1:RayJob")


def test_a_stack_that_fails_on_an_output_says_so_once_not_once_per_waiting_resource(tmp_path):
    """The resources that waited on the failing read are collected when the next run starts or at exit; asyncio
    must not print each one's traceback of the error the caller already has."""
    script = tmp_path / "fail.py"
    script.write_text(textwrap.dedent("""
        import gc
        from tests.test_fail_closed import kuberay_15_rayjob_crd
        from tests.conftest import with_keys
        from gke_ray_tpu.stack.mock_engine import MockGke, load_stack_file, run_offline
        from gke_ray_tpu.core import REPO_ROOT

        config = with_keys(load_stack_file(REPO_ROOT / "Pulumi.dev.yaml"), capacity="flex-start")
        for _ in range(2):  # the next run clears what the first left waiting
            try:
                run_offline(config, gke=MockGke(served_rayjob_crd=kuberay_15_rayjob_crd()["spec"]))
            except ValueError as error:
                print("refused:", str(error).splitlines()[-1])
            gc.collect()
    """))
    done = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("refused: ") == 2 and "KubeRay >= 1.6.0" in done.stdout
    assert "never retrieved" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]


def test_only_echoes_of_the_raised_error_are_dropped(monkeypatch):
    """A cause with no text of its own (a bare KeyError) must not make every later error silent."""
    import asyncio

    from gke_ray_tpu.stack import mock_engine

    monkeypatch.setattr(mock_engine, "_RAISED", set())
    try:
        try:
            raise KeyError()
        except KeyError as bare:
            raise ValueError("invalid config gke-ray-tpu:numSlices") from bare
    except ValueError as failure:
        loop = asyncio.new_event_loop()
        monkeypatch.setattr(asyncio, "get_event_loop", lambda: loop)
        mock_engine._drop_echoes_of(failure)
    reported = []
    monkeypatch.setattr(loop, "default_exception_handler", reported.append)
    echo = {"message": "never retrieved", "exception": ValueError("While processing: invalid config gke-ray-tpu:numSlices")}
    other = {"message": "never retrieved", "exception": RuntimeError("the API server refused")}
    loop.call_exception_handler(echo)
    loop.call_exception_handler(other)
    loop.close()
    assert reported == [other]
