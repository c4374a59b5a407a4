"""The submit command on a stack whose runs wait in its queue, against the fake Kubernetes API (tests.fakes) behind
the fake Kueue (tests.fake_kueue): two runs competing for the stack's chips, a run whose second slice never comes
(evicted, requeued, given up, its cost bounded), an elastic run that starts on one slice and takes the second
when Ray's autoscaler asks for it, a run the queue could never admit refused before it is queued, and a deadline
inside Kueue's timeout refused. Times are the fake Kueue's clock (a minute a read)."""

from __future__ import annotations

import json
from decimal import Decimal
import re

import pytest

from gke_ray_tpu.components import tpu_queue
from gke_ray_tpu.core import kueue, kueue_quota, kueue_waiting
from gke_ray_tpu.core.ray_job import SUBMISSION_MODE, JobCommand, OwnCluster, RayJobRun, ray_job
from gke_ray_tpu.training.driver import connection, outcome, port_forward, run_cluster
from tests.fake_kueue import FakeKueue
from tests.fakes import FakeJobsClient, FakeKubeRay
from tests.schemas import validate_kueue, validate_ray_job
# run_dirs (autouse): run files go to a temporary directory.
from tests.test_training_submit import group_start, run_cli, run_dirs, step, write  # noqa: F401
from tests.test_training_submit_run_cluster import Bucket, per_run_cluster, per_run_spec

NAMES = kueue.queue_names("maxtext-tpu-cluster", "default", "rayClusterName")
WAIT = kueue_waiting.WaitSettings(timeout_s=900, requeue_limit=1)
"""Kueue's waiting as the stack would set it with podsReadyTimeout 900 and requeueLimit 1: 15 of the fake's reads,
enough for a run's head and 8 hosts to come up one a read."""
LONG_LOG = "\n".join([group_start(100, 101), *(step(pid, n, 6.0 - n / 10) for n in range(12) for pid in (100, 101))])


@pytest.fixture
def queued_outputs(dev_run) -> dict:
    """The dev stack scaled to zero with its queue (2 x v6e-16: 32 chips), as its outputs say it."""
    return {**dev_run.outputs, "capacity": "spot", "scaleToZero": True, "rayClusterSpec": per_run_spec(),
            "localQueue": NAMES.local_queue, "clusterQueue": NAMES.cluster_queue,
            "podsReadyTimeoutS": WAIT.timeout_s, "requeueLimit": WAIT.requeue_limit}


def stack_queue(chips: int = 32) -> tpu_queue.QueueObjects:
    """The queue the stack declares for its runs (installed Kueue), its chips set to ``chips``."""
    objects = tpu_queue.queue_objects({}, per_run_cluster(elastic_min_slices=1), NAMES)
    tpu = objects.cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert tpu == {"name": kueue.TPU, "nominalQuota": 32}
    tpu["nominalQuota"] = chips
    for manifest in (*objects.flavors, objects.cluster_queue, objects.local_queue):
        validate_kueue(manifest)
    return objects


@pytest.fixture
def queued(monkeypatch):
    """submit.main talks to a FakeKueue over a FakeKubeRay; returns a setter of them."""
    holder: dict = {"bucket": Bucket(), "checks": []}

    def use(jobs: FakeJobsClient, chips: int = 32, **kube) -> FakeKueue:
        fake = FakeKueue.of(FakeKubeRay(jobs, **kube), stack_queue(chips), wait=WAIT)
        holder["fake"] = fake
        return fake

    monkeypatch.setattr(port_forward, "kube_apis", lambda context, log=None: (holder["fake"].core, holder["fake"].custom))
    monkeypatch.setattr(port_forward, "_core_api", lambda context, log=None: holder["fake"].core)
    monkeypatch.setattr(connection, "connect", lambda address, hint, log, verbose=False, token=None:
                        holder["fake"].kube.jobs)
    monkeypatch.setattr(connection, "check_kuberay", lambda core, log, own_clusters=False:
                        holder["checks"].append(own_clusters))
    monkeypatch.setattr(outcome, "report", lambda run_dir, record, title, log: None)
    monkeypatch.setattr(run_cluster, "gcs_filesystem", lambda: holder["bucket"])
    monkeypatch.setattr(run_cluster, "POLL_S", 0)
    monkeypatch.setattr(run_cluster, "QUEUE_WATCH_S", 0)
    monkeypatch.setattr(run_cluster, "now", lambda: holder["fake"].now.timestamp())
    use.holder = holder
    return use


def kueue_lines(err: str) -> list[str]:
    return [line.removeprefix("[submit] Kueue: ") for line in err.splitlines() if line.startswith("[submit] Kueue: ")]


def test_two_runs_compete_for_the_stacks_chips_and_the_second_starts_when_the_first_ends(
        capsys, tmp_path, queued_outputs, queued):
    fake = queued(FakeJobsClient(log=LONG_LOG), ends_after={"other": 5})
    # Another user's run, submitted first, holds all 32 chips for five minutes of running.
    other = ray_job(RayJobRun("other", "default", JobCommand("python -m train", {}, "other"),
                              OwnCluster(per_run_spec(), 2), labels=kueue.queue_label(NAMES.local_queue)))
    fake.custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", other)

    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, queued_outputs), "run_name=mine")
    assert rc == 0, err
    [created] = [job for job in fake.kube.created if job["metadata"]["name"] == "maxtext-mine"]
    validate_ray_job(created)
    assert created["metadata"]["labels"] == {kueue.QUEUE_LABEL: NAMES.local_queue}
    # Queued in Kueue's words while the other run holds the chips, then admitted once it ended.
    said = kueue_lines(err)
    # Kueue names all the run lacks: the chips, and its workers' cpu and memory beyond what the other run's head and
    # workers leave (the queue holds 2 heads of 8.5 cpu and 16.5Gi, the autoscaler's included, and 8 workers of 8 cpu
    # and 200G; the other run took a head of 8 cpu and 16Gi and 8 workers).
    waiting = (f"queued in {NAMES.local_queue}: couldn't assign flavors to pod set tpu-group: insufficient unused "
               f"quota for cpu in flavor {NAMES.host_flavor}, 63 more needed, insufficient unused quota for "
               f"google.com/tpu in flavor {NAMES.tpu_flavor}, 32 more needed, insufficient unused quota for memory in "
               f"flavor {NAMES.host_flavor}, {(8 * 200 * 10**9 - 2**30) // 1024}Ki more needed [2 slices]")
    assert waiting in said, err
    admitted = next(i for i, line in enumerate(said) if line.startswith(f"admitted by {NAMES.cluster_queue}"))
    assert said.index(waiting) < admitted
    other_workload = fake.workload_of("other")
    finished = next(c for c in other_workload["status"]["conditions"] if c["type"] == "Finished")
    admitted_at = next(c for c in fake.workload_of("maxtext-mine")["status"]["conditions"] if c["type"] == "Admitted")
    assert finished["lastTransitionTime"] <= admitted_at["lastTransitionTime"]
    # Kueue's line comes before the slices': the run waited in the queue, not on GKE.
    assert err.index(waiting) < err.index("waiting for TPU slices: 0 of 8 hosts ready")
    assert "[submit] maxtext-mine SUCCEEDED" in err


def test_a_run_whose_second_slice_never_comes_is_evicted_requeued_and_given_up_in_one_line_at_a_bounded_cost(
        capsys, tmp_path, queued_outputs, queued):
    fake = queued(FakeJobsClient(log=LONG_LOG), slices_that_come=1)
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, queued_outputs), "run_name=slow")
    assert rc == 1, err
    said = kueue_lines(err)
    assert any(line.startswith("evicted for slow slices (its pods were not all ready in time); back in the queue at")
               and line.endswith("(requeue 1) [2 slices]") for line in said), err
    given_up = ("given up: Kueue deactivated the run after 1 requeue (The workload is deactivated due to exceeding "
                "the maximum number of re-queuing retries); delete its RayJob, or set its Workload's spec.active to "
                "true to queue it again")
    assert said[-1] == f"{given_up} [2 slices]"
    # The run's end: one error line, Kueue's, after the outcome line; running the command again is a new attempt.
    lines = err.splitlines()
    failed = lines.index("[submit] maxtext-slow FAILED; its last error lines:")
    assert lines[failed + 1:] == [f"[submit]     {given_up}", "[submit] run the same command again to resume run "
                                  "slow from its latest checkpoint as a new attempt"]
    assert len(fake.evictions) == 1 and fake.kube.pods == {} and fake.kube.clusters == set()
    assert fake.kube.jobs.submitted == []  # the job never started: no Ray head took it
    # Billed while waiting: slice 0 up until each of the 2 admissions timed out (15 minutes each), slice 1 never:
    # at most 2 x 1 slice x 900 s, Kueue's bound (core.kueue_waiting.waiting_cost) without GKE's scale-down.
    bound = kueue_waiting.waiting_cost("spot", 2, WAIT, scale_down_s=0)
    assert (bound.attempts, bound.slices_billed, bound.seconds_per_attempt) == (2, 1, 900)
    assert 0 < fake.slice_seconds <= 2 * 1 * 900


def test_an_elastic_run_starts_on_one_slice_and_takes_the_second_when_the_autoscaler_asks_for_it(
        capsys, tmp_path, queued_outputs, queued):
    fake = queued(FakeJobsClient(log=LONG_LOG), grows_after=1)
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, queued_outputs), "--elastic", "run_name=grow")
    assert rc == 0, err
    [created] = fake.kube.created
    validate_ray_job(created)
    assert created["metadata"]["annotations"] == {kueue.ELASTIC_JOB_ANNOTATION: "true"}
    cluster = created["spec"]["rayClusterSpec"]
    (group,) = cluster["workerGroupSpecs"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 2)
    # It started on its one slice: KubeRay ran the job once 4 hosts were up.
    assert "waiting for TPU slices: 4 of 4 hosts ready" in err and "of 8 hosts" not in err
    # Kueue admitted the second slice when the autoscaler asked for it, as a new Workload slice replacing the first.
    said = kueue_lines(err)
    assert said[-1] == f"admitted by {NAMES.cluster_queue}; all its pods are ready [2 slices]", err
    first, second = sorted(fake.workloads.values(), key=lambda w: w["metadata"]["creationTimestamp"])
    for workload in (first, second):
        validate_kueue(workload)
    assert [s["count"] for s in first["spec"]["podSets"]] == [1, 4] and [s["count"] for s in second["spec"]["podSets"]] == [1, 8]
    replaced = next(c for c in first["status"]["conditions"] if c["type"] == "Finished")
    assert (replaced["status"], replaced["reason"]) == ("True", "WorkloadSliceReplaced")
    assert next(c for c in second["status"]["conditions"] if c["type"] == "Admitted")["status"] == "True"
    assert second["status"]["admission"]["podSetAssignments"][1]["resourceUsage"][kueue.TPU] == "32"
    # Both slices were up, whole, before the run ended (the Ray side: tests/test_tpu_path.py).
    assert fake.peak_slices[f"maxtext-grow-x7k2p"] == 2


def test_a_run_the_queue_could_never_admit_is_refused_before_anything_is_made(capsys, tmp_path, queued_outputs, queued):
    fake = queued(FakeJobsClient(log=LONG_LOG), chips=16)
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, queued_outputs), "--slices", "2", "run_name=big")
    assert rc == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1] == (
        f"python -m gke_ray_tpu.training.submit: error: invalid config --slices=2: expected a run ClusterQueue "
        f"{NAMES.cluster_queue} can admit: couldn't assign flavors to pod set tpu-group: insufficient quota for "
        f"google.com/tpu in flavor {NAMES.tpu_flavor}, previously considered podsets requests (0) + current podset "
        "request (32) > maximum capacity (16)")
    assert fake.kube.created == [] and fake.workloads == {} and queued.holder["bucket"].objects == {}
    # One slice fits, and is queued.
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, queued_outputs), "--slices", "1", "run_name=small")
    assert rc == 0, err


def test_a_deadline_inside_kueues_timeout_is_refused_and_the_default_lies_past_it(capsys, tmp_path, queued_outputs,
                                                                                  queued):
    fake = queued(FakeJobsClient(log=LONG_LOG))
    outputs = write(tmp_path, queued_outputs)
    rc, err = run_cli(capsys, "--outputs-file", outputs, "--pre-running-deadline-seconds", "900", "run_name=d")
    assert rc == 2 and "--pre-running-deadline-seconds=900: expected more than Kueue's 900 s PodsReady timeout" in err
    assert "fails the run instead of sending it back to the queue" in err and fake.kube.created == []
    assert run_cli(capsys, "--outputs-file", outputs, "run_name=d")[0] == 0
    [created] = fake.kube.created
    assert created["spec"]["preRunningDeadlineSeconds"] == 900 + kueue_waiting.QUEUED_DEADLINE_MARGIN_S
    assert kueue_waiting.deadline_problems(created["spec"]["preRunningDeadlineSeconds"], 0, WAIT) == []
    assert queued.holder["checks"] == [True]  # the RayJob CRD's floor too (a run that brings its own cluster)


def test_a_held_stack_has_no_queue_in_its_outputs(tmp_path, dev_run, queued_outputs):
    from gke_ray_tpu.core.errors import ConfigError
    from gke_ray_tpu.training.driver import stack_outputs

    with pytest.raises(ConfigError, match="localQueue='maxtext-tpu-cluster': expected null on a stack that holds"):
        stack_outputs.load_file(write(tmp_path, {**dev_run.outputs, "localQueue": NAMES.local_queue}))
    loaded = stack_outputs.load_file(write(tmp_path, queued_outputs))
    assert loaded.queue_wait == WAIT
    existing = stack_outputs.load_file(write(tmp_path, {**queued_outputs, "podsReadyTimeoutS": None,
                                                        "requeueLimit": None}))
    assert existing.queue_wait == kueue_waiting.WaitSettings(requeue_limit=None)  # a cluster's own Kueue: its defaults


def test_the_stack_exports_its_queue_for_the_submit_command(run_stack):
    run = run_stack(capacity="spot", scaleToZero="true", podsReadyTimeout="900", requeueLimit="2")
    assert {key: run.outputs[key] for key in ("localQueue", "clusterQueue", "podsReadyTimeoutS", "requeueLimit")} == {
        "localQueue": NAMES.local_queue, "clusterQueue": NAMES.cluster_queue, "podsReadyTimeoutS": 900,
        "requeueLimit": 2}
    # What the submit command reads back from them.
    outputs = json.loads(json.dumps(run.outputs))
    from gke_ray_tpu.training.driver.stack_outputs import from_mapping

    assert from_mapping(outputs, "outputs").queue_wait == kueue_waiting.WaitSettings(timeout_s=900, requeue_limit=2)
    assert re.fullmatch(r"[a-z0-9-]+", outputs["clusterQueue"])


def test_a_countdown_is_no_news():
    """Kueue's line for a run backing off counts down at every look; said again only when something else changes."""
    from gke_ray_tpu.training.driver.queue_status import Standing

    at = "evicted for slow slices (its pods were not all ready in time); back in the queue at 06:44:00 UTC (in {} s)"
    assert Standing(at.format(47), 2).news == Standing(at.format(42), 2).news
    assert Standing(at.format(47), 2).news != Standing(at.format(47), 1).news
    assert Standing(at.format(47), 2).said().endswith("(in 47 s) [2 slices]")
