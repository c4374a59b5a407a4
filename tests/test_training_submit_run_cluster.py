"""The submit command on a stack that scales to zero: each run a RayJob with its own RayCluster, against a fake
Kubernetes API (tests.fakes.FakeKubeRay) and the fake Jobs API the other submit tests use."""

from __future__ import annotations

import io
import os
import re
import shlex
import signal
import zipfile

import pytest
import yaml
from hypothesis import given, strategies as st

from gke_ray_tpu.components.ray_manifests import RayClusterSpec, ray_cluster_spec
from gke_ray_tpu.core import code_archive
from gke_ray_tpu.core.capacity import CAPACITY
from gke_ray_tpu.core.kuberay import auth_secret_name
from gke_ray_tpu.core.ray_job import (
    DEFAULT_PRE_RUNNING_DEADLINE_SECONDS, JobCommand, OwnCluster, RayJobRun, is_multi_host, max_ray_job_name, ray_job,
    ray_job_name,
)
from gke_ray_tpu.core.tpu_catalogue import slice_shape
from gke_ray_tpu.training import submit
from gke_ray_tpu.training.driver import connection, outcome, port_forward, run_cluster, runs
from gke_ray_tpu.training.driver.run_files import JobRecord
from tests.fakes import FakeJobsClient, FakeKubeRay
from tests.schemas import validate_ray_job
# python_ctrl_c and run_dirs (autouse: run files go to a temporary directory) are fixtures.
from tests.test_training_submit import COLD_START_LOG, STEPS_LOG, python_ctrl_c, run_cli, run_dirs, write  # noqa: F401

HOSTS = 8
"""The dev stack's TPU hosts: 2 v6e 4x4 slices of 4 hosts."""


def per_run_cluster(elastic_min_slices: int = 2) -> RayClusterSpec:
    """The stack whose runs bring their cluster: 2 x v6e 4x4 on flex-start."""
    return RayClusterSpec(
        name="run", namespace="default", service_account="ray-ksa", bucket_name="my-tpu-project-maxtext-checkpoints",
        shape=slice_shape("v6e", "4x4"), num_slices=2, elastic_min_slices=elastic_min_slices, dcn_interfaces=0,
        image="rayproject/ray:nightly-py312-tpu", megascale_port=9915, compute_class=None, capacity=CAPACITY["flex-start"],
        scale_to_zero=True,
    )


def per_run_spec() -> dict:
    """A RayCluster spec as a run brings it: the stack's head and TPU group, no autoscaler, every slice."""
    return ray_cluster_spec(per_run_cluster())


@pytest.fixture(scope="module")
def per_run_outputs(dev_run) -> dict:
    return {**dev_run.outputs, "capacity": "flex-start", "scaleToZero": True, "rayClusterSpec": per_run_spec()}


class Bucket:
    """The gcsfs calls the upload makes, on a dict."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}
        self.writes = 0

    def exists(self, path):
        return path in self.objects

    def pipe_file(self, path, value, content_type):
        self.writes += 1
        self.objects[path] = value


@pytest.fixture
def kube(monkeypatch):
    """submit.main talks to a FakeKubeRay whose Ray heads answer with a FakeJobsClient; returns a setter."""
    holder: dict = {"bucket": Bucket(), "addresses": [], "tokens": [], "checks": 0}

    def use(jobs: FakeJobsClient, **kwargs) -> FakeKubeRay:
        holder["kube"] = FakeKubeRay(jobs, **kwargs)
        return holder["kube"]

    def connect(address, hint, log, verbose=False, token=None):
        holder["addresses"].append(address)
        holder["tokens"].append(token)
        return holder["kube"].jobs

    def check_kuberay(core, log, own_clusters=False):
        holder["checks"] += 1

    monkeypatch.setattr(port_forward, "kube_apis", lambda context, log=None: (holder["kube"].core, holder["kube"].custom))
    monkeypatch.setattr(port_forward, "_core_api", lambda context, log=None: holder["kube"].core)
    monkeypatch.setattr(connection, "connect", connect)
    monkeypatch.setattr(connection, "check_kuberay", check_kuberay)
    monkeypatch.setattr(outcome, "report", lambda run_dir, record, title, log: None)
    monkeypatch.setattr(run_cluster, "gcs_filesystem", lambda: holder["bucket"])
    monkeypatch.setattr(run_cluster, "POLL_S", 0)
    use.holder = holder
    return use


def test_a_run_is_a_crd_valid_rayjob_that_brings_its_cluster_and_deletes_it(capsys, tmp_path, per_run_outputs, kube,
                                                                          run_dirs):
    fake = kube(FakeJobsClient(log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "--backoff-limit", "1", "run_name=r")
    assert rc == 0, err

    # One RayJob, valid against KubeRay's CRD, that owns its cluster: what Kueue can manage later.
    [created] = fake.created
    validate_ray_job(created)
    spec = created["spec"]
    assert created["metadata"] == {"name": "maxtext-r", "namespace": "default"}
    assert "clusterSelector" not in spec and spec["shutdownAfterJobFinishes"] is True
    assert spec["rayClusterSpec"] == per_run_outputs["rayClusterSpec"]
    assert (spec["jobId"], spec["submissionMode"], spec["backoffLimit"]) == ("maxtext-r", "HTTPMode", 1)
    assert spec["preRunningDeadlineSeconds"] == DEFAULT_PRE_RUNNING_DEADLINE_SECONDS
    check, _, command = spec["entrypoint"].partition(" && ")
    assert command.startswith("python -m gke_ray_tpu.training.worker.trainer ") and "run_name=r" in command

    # The job imports the code archive the command put in the bucket, and waits minutes for its slices.
    env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert "py_modules" not in env and env["env_vars"]["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] == "900"
    [(path, data)] = kube.holder["bucket"].objects.items()
    assert env["env_vars"]["PYTHONPATH"] == "/data/" + path.split("/", 1)[1]
    assert path.startswith("my-tpu-project-maxtext-checkpoints/_code/gke-ray-tpu-") and path.endswith(".zip")
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert {"gke_ray_tpu/core/kuberay.py", "gke_ray_tpu/training/worker/trainer.py", "gke_ray_tpu/core/presets/__init__.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n
                or not n.startswith(("gke_ray_tpu/core/", "gke_ray_tpu/training/")) and n != "gke_ray_tpu/__init__.py"]
    # Before it imports anything, the job checks that archive against the code this command uploaded.
    archive, expected = shlex.split(check)[-2:]
    assert check.startswith("python -I -c ") and archive == env["env_vars"]["PYTHONPATH"]
    (tmp_path / "uploaded.zip").write_bytes(data)
    code_archive.verify_archive(str(tmp_path / "uploaded.zip"), expected)  # exits if it does not match

    # KubeRay posted the job (HTTPMode); the command never submitted one itself.
    assert [j["submission_id"] for j in fake.jobs.submitted] == ["maxtext-r"]
    assert "submit_job" not in fake.jobs.calls

    # The wait, from the RayJob's and the pods' status: hosts ready only ever go up, to all of them.
    ready = [int(m.group(1)) for m in re.finditer(r"waiting for TPU slices: (\d+) of 8 hosts ready", err)]
    assert ready == sorted(ready) and ready[-1] == HOSTS and len(ready) >= 2, err
    # The port-forward went to the run's own head service, after the cluster was up.
    job = fake.ray_jobs["maxtext-r"]
    cluster = job["status"]["rayClusterName"]
    assert list(dict.fromkeys(fake.services_read)) == [f"{cluster}-head-svc"]
    assert [a.startswith("http://127.0.0.1:") for a in kube.holder["addresses"]] == [True]
    # The Jobs API was reached with the run's own cluster's token, read from the Secret KubeRay made for it.
    assert fake.secrets_read == [auth_secret_name(cluster)]
    assert [token.value for token in kube.holder["tokens"]] == [f"token-of-{cluster}"]
    assert err.index("hosts ready") < err.index("port-forward 127.0.0.1:") < err.index("step 1/")

    # The job id is recorded, with the chips the run held; the cluster is gone after.
    record = JobRecord.load(run_dirs / "r")
    assert (record.submission_id, record.status, record.chips) == ("maxtext-r", "SUCCEEDED", 2 * 16)
    # KubeRay acts on its own; the fake, when read. The command does not wait for a succeeded run's cleanup:
    # KubeRay deletes the cluster ttlSecondsAfterFinished after the end (the fake's next read, a minute later).
    job = fake.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "maxtext-r")
    assert job["status"]["jobDeploymentStatus"] == "Complete"
    fake.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "maxtext-r")
    assert fake.clusters == set() and fake.pods == {}
    assert f"KubeRay deletes RayCluster {cluster} 60 s after the job ended" in err
    assert kube.holder["checks"] == 1


def test_a_run_says_it_waits_for_its_tpu_slices_until_ray_train_has_them(capsys, tmp_path, per_run_outputs, kube):
    fake = kube(FakeJobsClient(log=COLD_START_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "run_name=r")
    assert rc == 0, err
    lines = err.splitlines()
    waits = [line for line in lines if "TPU slices" in line and "hosts ready" not in line]
    assert waits == [
        "[submit] this stack scales its TPU slices to zero: each run brings its own RayCluster, whose v6e-16 slices "
        "take minutes to start before KubeRay submits the job",
        "[submit] waiting for TPU slices: Ray Train reserves 2 slice(s) of 4x4; slices that are not running yet are "
        "started by the autoscalers (minutes)",
        "[submit] still waiting for TPU slices after 900 s (8 workers): Ray Train asks again; check the node pools' "
        "scale-up events if this repeats",
    ]
    assert lines.index(waits[-1]) < next(i for i, line in enumerate(lines) if "step 1/" in line)
    # The job waits minutes for its slices: the cold-start timeouts are in its runtime env.
    [created] = fake.created
    assert yaml.safe_load(created["spec"]["runtimeEnvYAML"])["env_vars"]["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] == "900"


def test_a_spot_run_pays_for_its_own_slices_at_the_spot_rate(capsys, tmp_path, per_run_outputs, kube, run_dirs):
    kube(FakeJobsClient(log=STEPS_LOG))
    outputs = write(tmp_path, {**per_run_outputs, "capacity": "spot"})
    rc, err = run_cli(capsys, "--outputs-file", outputs, "--slices", "1", "run_name=spot")
    assert rc == 0, err
    record = JobRecord.load(run_dirs / "spot")
    assert (record.chips, record.usd_per_chip_hour) == (16, 17.28 / 16)


def test_the_code_archive_is_uploaded_once_per_content(capsys, tmp_path, per_run_outputs, kube):
    outputs = write(tmp_path, per_run_outputs)
    kube(FakeJobsClient(log=STEPS_LOG))
    assert run_cli(capsys, "--outputs-file", outputs, "run_name=a")[0] == 0
    rc, err = run_cli(capsys, "--outputs-file", outputs, "run_name=b")
    assert rc == 0 and kube.holder["bucket"].writes == 1
    assert re.search(r"code archive gs://\S+/_code/gke-ray-tpu-[0-9a-f]{12}\.zip is there already", err), err


def test_the_archive_goes_to_a_gcs_bucket_through_gcsfs(tmp_path, monkeypatch):
    """The upload with the real gcsfs, against a Cloud Storage emulator on 127.0.0.1. gcsfs and google.auth read
    part of their environment on import, before the emulator's was set: so gcsfs's plain filesystem (not its
    extended one, which asks for the bucket's layout over gRPC), anonymous (no metadata server is looked for)."""
    from gcsfs.core import GCSFileSystem

    from gke_ray_tpu.core import code_archive
    from tests.gcs_emulator import GcsEmulator

    files = code_archive.package_files()
    obj = code_archive.archive_object(code_archive.digest(files))
    said: list[str] = []
    with GcsEmulator("code-bucket", tmp_path / "fake-gcs-server.log") as gcs:
        for key, value in gcs.env.items():
            monkeypatch.setenv(key, value)
        GCSFileSystem.clear_instance_cache()
        try:
            first = GCSFileSystem(token="anon")
            assert run_cluster.upload_archive(first, "code-bucket", files, said.append) == obj
            GCSFileSystem.clear_instance_cache()
            fs = GCSFileSystem(token="anon")
            assert fs is not first
            assert run_cluster.upload_archive(fs, "code-bucket", files, said.append) == obj
            assert gcs.objects("_code/") == [obj]
            assert fs.info(f"code-bucket/{obj}")["contentType"] == "application/zip"
            zipped = zipfile.ZipFile(io.BytesIO(fs.cat_file(f"code-bucket/{obj}")))
            assert sorted(zipped.namelist()) == sorted(files)
            assert zipped.read("gke_ray_tpu/core/kuberay.py") == files["gke_ray_tpu/core/kuberay.py"].read_bytes()
        finally:
            GCSFileSystem.clear_instance_cache()
    assert said == [f"uploaded the code archive to gs://code-bucket/{obj}", f"code archive gs://code-bucket/{obj} is "
                                                                            "there already"]


def test_a_run_that_never_gets_its_slices_says_why_in_one_line_before_the_deadline_ends_it(
        capsys, tmp_path, per_run_outputs, kube):
    from kubernetes import client as k8s

    fake = kube(FakeJobsClient(log=STEPS_LOG), slices_never_come=True)
    # Another run's pod, whose name starts like this run's RayJob: not this run's news.
    fake.events.append(k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name="other"), reason="FailedScheduling", message="another run's pod", count=1,
        involved_object=k8s.V1ObjectReference(kind="Pod", name="maxtext-n-2-q8r4w-tpu-worker-0"),
        last_timestamp="2026-12-04T06:59:00Z"))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs),
                      "--pre-running-deadline-seconds", "1200", "run_name=n")
    assert rc == 1, err
    lines = err.splitlines()
    why = [i for i, line in enumerate(lines) if "not scheduled yet" in line]
    ended = [i for i, line in enumerate(lines) if "ended: PreRunningDeadlineExceeded" in line]
    assert len(why) == 1 and len(ended) == 1 and why[0] < ended[0], err
    assert "s left of preRunningDeadlineSeconds=1200): FailedScheduling: 0/3 nodes are available" in lines[why[0]]
    assert "NotTriggerScaleUp: pod didn't trigger scale-up" in lines[why[0]] and "GCE quota exceeded" in lines[why[0]]
    assert "another run's pod" not in err and "(preRunningDeadlineSeconds=1200)" in lines[ended[0]]
    assert lines[ended[0] - 1].startswith("[submit] maxtext-n FAILED; its last error lines:")
    # The job never reached a Ray head; KubeRay deletes its cluster ttlSecondsAfterFinished after the end (the
    # fake's next read, a minute later).
    assert kube.holder["addresses"] == [] and fake.jobs.submitted == []
    fake.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "maxtext-n")
    assert fake.clusters == set() and fake.pods == {}


class InterruptedOnce(FakeJobsClient):
    """A running job whose first log stream gets a real SIGINT (Ctrl-C) after its first chunk."""

    async def tail_job_logs(self, sid):
        import asyncio

        self.streams += 1
        if self.streams == 1:
            yield "step: 0, loss: 6.061\n"
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(60)
        async for chunk in super().tail_job_logs(sid):
            yield chunk


def test_ctrl_c_leaves_the_run_going_says_how_to_stop_it_and_follow_attaches_again(
        capsys, tmp_path, per_run_outputs, kube, python_ctrl_c, run_dirs):
    fake = kube(InterruptedOnce(log=STEPS_LOG))
    outputs = write(tmp_path, per_run_outputs)
    rc, err = run_cli(capsys, "--outputs-file", outputs, "run_name=c")
    assert rc == 130 and "Traceback" not in err, err
    assert fake.jobs.stopped == [] and fake.jobs.jobs["maxtext-c"] == "RUNNING"
    assert err.splitlines()[-1] == (
        f"[submit] interrupted: run c keeps going on its own cluster. Follow it again with `python -m gke_ray_tpu.training.submit "
        f"--outputs-file {outputs} --follow c`; stop it (and delete its cluster) with "
        "`kubectl delete rayjob -n default maxtext-c`"
    )
    # --follow finds the RayJob by its job id and follows the job on the run's cluster to its end.
    rc, err = run_cli(capsys, "--outputs-file", outputs, "--follow", "c")
    assert rc == 0, err
    assert "maxtext-c is RUNNING" in err and "[submit] maxtext-c SUCCEEDED" in err
    assert fake.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "maxtext-c")["status"][
        "jobDeploymentStatus"] == "Complete"
    fake.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "maxtext-c")  # a minute later
    assert fake.clusters == set()  # ttlSecondsAfterFinished (60 s) after the end
    # Once the cluster is gone, --follow reports the run from its RayJob and the log this machine saved.
    rc, err = run_cli(capsys, "--outputs-file", outputs, "--follow", "c")
    assert rc == 0 and "its cluster is gone; the job's log is what this machine saved" in err, err
    assert "[submit] maxtext-c SUCCEEDED: 3 steps, loss 6.061 -> 5.282" in err
    assert JobRecord.load(run_dirs / "c").status == "SUCCEEDED"


class FailsFirst(FakeJobsClient):
    """A job whose first attempt fails (its worker raised) and whose retry succeeds."""

    async def tail_job_logs(self, sid):
        self.final = "FAILED" if self.streams == 0 else "SUCCEEDED"
        async for chunk in super().tail_job_logs(sid):
            yield chunk


def test_a_failed_run_is_retried_on_a_new_cluster_and_followed_there(capsys, tmp_path, per_run_outputs, kube,
                                                                     run_dirs):
    fake = kube(FailsFirst(log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "--backoff-limit", "1",
                      "--slices", "1", "run_name=t")
    assert rc == 0, err
    clusters = [job["cluster"] for job in fake.jobs.submitted]
    assert len(clusters) == 2 and clusters[0] != clusters[1]
    assert list(dict.fromkeys(fake.services_read)) == [f"{cluster}-head-svc" for cluster in clusters]
    assert f"maxtext-t FAILED on RayCluster {clusters[0]}; KubeRay retries the run on a new cluster" in err
    # One slice asked for: the run's cluster has one slice of 4 hosts, and the record counts its 16 chips.
    [created] = fake.created
    assert [g["replicas"] for g in created["spec"]["rayClusterSpec"]["workerGroupSpecs"]] == [1]
    assert "waiting for TPU slices: 4 of 4 hosts ready" in err
    assert JobRecord.load(run_dirs / "t").chips == 16
    for _ in range(2):  # KubeRay's turn: Complete, then the cluster deleted ttlSecondsAfterFinished (60 s) later
        fake.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "maxtext-t")
    assert fake.clusters == set()


def test_dashboard_forwards_to_the_running_runs_head(capsys, tmp_path, per_run_outputs, kube, monkeypatch):
    fake = kube(FakeJobsClient(log=STEPS_LOG))
    outputs = write(tmp_path, per_run_outputs)
    # A run whose cluster is up: the command is stopped while it follows it.
    monkeypatch.setattr(runs, "stream", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    assert run_cli(capsys, "--outputs-file", outputs, "run_name=d")[0] == 130
    cluster = fake.ray_jobs["maxtext-d"]["status"]["rayClusterName"]
    monkeypatch.setattr(submit, "hold", lambda: (_ for _ in ()).throw(KeyboardInterrupt))
    fake.services_read.clear()
    assert submit.main(["--outputs-file", outputs, "--dashboard"]) == 0
    assert list(dict.fromkeys(fake.services_read)) == [f"{cluster}-head-svc"]
    rc, err = run_cli(capsys, "--outputs-file", outputs, "--dashboard", "--follow", "other")
    assert rc == 2 and "--follow='other': expected a run that is running" in err
    # Two runs running: --dashboard alone cannot tell which; --follow picks one.
    assert run_cli(capsys, "--outputs-file", outputs, "run_name=e")[0] == 130
    rc, err = run_cli(capsys, "--outputs-file", outputs, "--dashboard")
    assert rc == 2 and "2 runs running (maxtext-d, maxtext-e)" in err and "--follow RUN to pick one" in err
    fake.services_read.clear()
    assert submit.main(["--outputs-file", outputs, "--dashboard", "--follow", "d"]) == 0
    assert list(dict.fromkeys(fake.services_read)) == [f"{cluster}-head-svc"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--backoff-limit", "-1"], "--backoff-limit=-1: expected an integer >= 0"),
        (["--pre-running-deadline-seconds", "0"], "--pre-running-deadline-seconds=0: expected an integer >= 1"),
    ],
)
def test_bad_run_settings_are_one_line_and_exit_2(capsys, tmp_path, per_run_outputs, kube, argv, message):
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), *argv)
    assert (rc, err.count("\n")) == (2, 1) and message in err, err


def test_retries_need_a_stack_that_scales_to_zero(capsys, tmp_path, dev_run):
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dict(dev_run.outputs)), "--backoff-limit", "2")
    assert rc == 2 and "--backoff-limit=2: expected 0 on a stack that holds its slices" in err


def test_outputs_that_disagree_on_scaling_to_zero_are_refused(tmp_path, dev_run):
    from gke_ray_tpu.core.errors import ConfigError
    from gke_ray_tpu.training.driver import stack_outputs

    with pytest.raises(ConfigError, match="rayClusterSpec.*no rayClusterSpec on a stack that holds its slices"):
        stack_outputs.load_file(write(tmp_path, {**dev_run.outputs, "rayClusterSpec": per_run_spec()}))
    autoscaled = {**per_run_spec(), "enableInTreeAutoscaling": True}
    with pytest.raises(ConfigError, match="a run.s cluster spec: a per-run cluster runs Ray.s autoscaler only as a Kueue elastic job"):
        stack_outputs.load_file(write(tmp_path, {**dev_run.outputs, "scaleToZero": True,
                                                 "rayClusterSpec": autoscaled}))
    # Scaling to zero without the spec each run brings: no run could be made (a stack deployed before runs brought
    # their own cluster).
    with pytest.raises(ConfigError, match="rayClusterSpec=None: expected the RayCluster spec each run brings"):
        stack_outputs.load_file(write(tmp_path, {**dev_run.outputs, "scaleToZero": True}))
    with pytest.raises(ConfigError, match="rayClusterSpec='x': expected a dict"):
        stack_outputs.load_file(write(tmp_path, {**dev_run.outputs, "scaleToZero": True, "rayClusterSpec": "x"}))


@given(st.text(alphabet=st.sampled_from("abcXYZ019_.-"), min_size=1, max_size=100), st.sampled_from([1, 4]))
def test_a_rayjob_name_is_what_kuberay_and_the_tpu_webhook_accept_and_differs_per_submission(run_name, hosts):
    from gke_ray_tpu.core.naming import RAY_JOB_NAME, RAY_TPU_CLUSTER_NAME

    spec = {"workerGroupSpecs": [{"numOfHosts": hosts, "replicas": 2}]}
    sid = f"maxtext-{run_name}"
    name = ray_job_name(sid, max_ray_job_name(is_multi_host(spec)))
    assert RAY_JOB_NAME.matches(name), name
    if hosts > 1:  # the cluster KubeRay names after it, <name>-<5 random characters>, on multi-host slices
        assert RAY_TPU_CLUSTER_NAME.matches(f"{name}-x7k2p"), name
    assert ray_job_name(sid + "-attempt-2", max_ray_job_name(is_multi_host(spec))) != name


def test_a_valid_short_submission_id_is_its_own_rayjob_name():
    assert ray_job_name("maxtext-llama3-8b-20261204-060000", 35) == "maxtext-llama3-8b-20261204-060000"
    # Two ids that would clean up to the same name keep apart.
    assert ray_job_name("maxtext-Run_1", 35) != ray_job_name("maxtext-run-1", 35)
    # Multi-host slices: 41 characters for the cluster (GKE's TPU webhook), so 35 for its RayJob.
    assert max_ray_job_name(is_multi_host(per_run_spec())) == 35
    assert max_ray_job_name(is_multi_host({"workerGroupSpecs": [{"numOfHosts": 1}]})) == 47


def test_a_user_who_may_not_list_rayjobs_gets_one_line_and_exit_3(capsys, tmp_path, per_run_outputs, kube,
                                                                  monkeypatch):
    from tests.fakes import api_error, forbidden

    fake = kube(FakeJobsClient(log=STEPS_LOG))

    def may_not_list(*args):
        raise api_error(forbidden("ray.io", "rayjobs", "", 'User "someone@example.com" cannot list resource '
                                                          '"rayjobs" in API group "ray.io" in the namespace "default"'))

    monkeypatch.setattr(fake.custom, "list_namespaced_custom_object", may_not_list)
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "run_name=f")
    assert rc == 3 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "python -m gke_ray_tpu.training.submit: error: listing the RayJobs of namespace default (403 Forbidden: "
        'rayjobs.ray.io is forbidden: User "someone@example.com" cannot list resource "rayjobs" in API group "ray.io" '
        'in the namespace "default"): is the kubeconfig pointing at the stack\'s cluster, and may this user manage '
        "RayJobs in its namespace?"
    )
    assert fake.created == []


def test_a_long_wait_is_said_again_with_the_time_it_took_and_the_deadline_left(per_run_outputs):
    """Minutes on a clock that the waits move: the same news is repeated every REMIND_S, not every poll."""
    from datetime import datetime

    fake = FakeKubeRay(FakeJobsClient(), slices_never_come=True, seconds_per_read=36)
    manifest = ray_job(RayJobRun("maxtext-w", "default", JobCommand("python -m x", {}, "maxtext-w"),
                                 OwnCluster(per_run_spec(), 2), pre_running_deadline_seconds=3600))
    fake.custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", manifest)
    now = [datetime.fromisoformat(FakeKubeRay.CREATED.replace("Z", "+00:00")).timestamp()]
    said: list[str] = []

    def sleep(seconds):
        now[0] += seconds

    runs = run_cluster.RunClusters(fake.core, fake.custom, "default", said.append, sleep=sleep, poll_s=30,
                                   clock=lambda: now[0])
    waited = runs.wait_for_cluster("maxtext-w", deadline_s=3600)
    assert waited.cluster is None and waited.ray_job["status"]["reason"] == "PreRunningDeadlineExceeded"
    again = [line for line in said if "s after the RayJob started" in line]
    # 100 reads 30 s apart: about 3000 s of waiting, said again every 300 s (not every 30 s).
    assert 8 <= len(again) <= 10, said
    seconds = [int(re.search(r", (\d+) s after", line).group(1)) for line in again]
    assert all(b - a >= run_cluster.REMIND_S for a, b in zip(seconds, seconds[1:]))
    [why] = [line for line in said if line.startswith("not scheduled yet")]
    left = int(re.search(r"\((\d+) s left of preRunningDeadlineSeconds=3600\)", why).group(1))
    assert 3600 - 60 <= left <= 3600


def test_a_run_whose_rayjob_was_deleted_while_it_waited_is_one_line_and_exit_3(capsys, tmp_path, per_run_outputs,
                                                                               kube, monkeypatch):
    fake = kube(FakeJobsClient(log=STEPS_LOG), slices_never_come=True)
    read = fake.custom.get_namespaced_custom_object

    def deleted_after_a_while(group, version, namespace, plural, name):
        if fake.reads >= 3:
            fake.ray_jobs.pop(name, None)
        return read(group, version, namespace, plural, name)

    monkeypatch.setattr(fake.custom, "get_namespaced_custom_object", deleted_after_a_while)
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "run_name=gone")
    assert rc == 3 and "Traceback" not in err
    assert err.splitlines()[-1] == ("python -m gke_ray_tpu.training.submit: error: RayJob default/maxtext-gone is gone: someone "
                                    "deleted it, which stopped its run and deleted its cluster")


def test_kuberays_pre_running_deadline_is_per_attempt_and_retried_like_any_failure(capsys, tmp_path, per_run_outputs,
                                                                                   kube):
    """No capacity: each attempt waits its deadline on a new cluster, (backoffLimit + 1) attempts in all."""
    fake = kube(FakeJobsClient(log=STEPS_LOG), slices_never_come=True, seconds_per_read=200)
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, per_run_outputs), "--backoff-limit", "2",
                      "--pre-running-deadline-seconds", "600", "run_name=retried")
    assert rc == 1, err
    job = fake.ray_jobs["maxtext-retried"]
    # KubeRay counts every failed attempt, the last too (kuberay's TestRayJobRetry: 2 retries + 1 = 3 failures).
    assert (job["status"]["failed"], job["status"]["reason"]) == (3, "PreRunningDeadlineExceeded")
    clusters = re.findall(r"\(RayCluster (maxtext-retried-\S+)\)", err)
    assert len(dict.fromkeys(clusters)) == 3, err  # the first attempt's cluster and two retries' new ones
    assert err.splitlines()[-2].endswith(
        "ended: PreRunningDeadlineExceeded (preRunningDeadlineSeconds=600): The RayJob has passed the "
        "preRunningDeadlineSeconds. StartTime: 2026-12-04 06:20:00 +0000 UTC. PreRunningDeadlineSeconds: 600"), err
