"""The fake Kueue (tests/fake_kueue.py) against Kueue's semantics: runs compete for one queue's chips in order, a
run whose second slice never comes is evicted when Kueue's PodsReady timeout ends and requeued after its backoff,
and every Workload it writes passes Kueue's CRD and reads back as one line (training.driver.queue_status.workload_line)."""

from __future__ import annotations

import pytest

from gke_ray_tpu.components.ray_manifests import RayClusterSpec, ray_cluster_spec
from gke_ray_tpu.components import tpu_queue
from gke_ray_tpu.core import kueue, kueue_quota, kueue_waiting
from gke_ray_tpu.core.capacity import CAPACITY
from gke_ray_tpu.core.ray_job import SUBMISSION_MODE, JobCommand, OwnCluster, RayJobRun, ray_job
from gke_ray_tpu.core.tpu_catalogue import slice_shape
from gke_ray_tpu.training.driver import queue_status
from tests.fake_kueue import FakeKueue
from tests.fakes import FakeJobsClient, FakeKubeRay
from tests.schemas import validate_kueue, validate_ray_job

NAMESPACE = "default"
NAMES = kueue.queue_names("maxtext-tpu-cluster", NAMESPACE, "rayClusterName")


def cluster(slices: int = 2) -> RayClusterSpec:
    """The dev stack on Spot, scaled to zero: a CPU head and 2 x v6e 4x4 (4 hosts of 4 chips)."""
    return RayClusterSpec(
        name="run", namespace=NAMESPACE, service_account="ray-ksa", bucket_name="ckpt", shape=slice_shape("v6e", "4x4"),
        num_slices=slices, elastic_min_slices=slices, dcn_interfaces=0, image="rayproject/ray:2.60.0-py312",
        megascale_port=9915, compute_class=None, capacity=CAPACITY["spot"], scale_to_zero=True)


def run_spec(slices: int = 2) -> dict:
    """The RayCluster a run of the dev stack brings."""
    return ray_cluster_spec(cluster(slices))


def queue(kube: FakeKubeRay, strategy: str = kueue.STRICT_FIFO, **wait) -> FakeKueue:
    objects = tpu_queue.queue_objects({"queueing_strategy": strategy}, cluster(), NAMES)
    return FakeKueue.of(kube, objects, wait=kueue_waiting.WaitSettings(**{"timeout_s": 1200, **wait}))


def queued_job(name: str, slices: int = 2) -> dict:
    return ray_job(RayJobRun(name, NAMESPACE, JobCommand("python -m train", {}, name), OwnCluster(run_spec(), slices),
                             labels=kueue.queue_label(NAMES.local_queue)))


def submit(fake: FakeKueue, name: str, slices: int = 2) -> None:
    job = queued_job(name, slices)
    validate_ray_job(job)
    fake.custom.create_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", job)


def read(fake: FakeKueue, name: str) -> dict:
    return fake.custom.get_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", name)


def line(fake: FakeKueue, name: str) -> str:
    workload = fake.workload_of(name)
    validate_kueue(workload)
    return queue_status.workload_line(workload, fake.events_of("Workload", workload["metadata"]["name"]), now=fake.now,
                               wait=fake.wait)


def test_a_queued_run_is_held_suspended_until_kueue_admits_it_and_runs_once_its_slices_are_up():
    kube = FakeKubeRay(FakeJobsClient(final="RUNNING"))
    fake = queue(kube)
    submit(fake, "a")
    assert kube.ray_jobs["a"]["spec"]["suspend"] is True  # Kueue's webhook default
    workload = fake.workload_of("a")
    assert workload["metadata"]["name"].startswith("rayjob-a-") and len(workload["metadata"]["name"]) == len("rayjob-a-") + 5
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("head", 1), ("tpu-group", 8)]
    job = read(fake, "a")
    assert job["spec"]["suspend"] is False
    assert line(fake, "a").startswith(f"admitted by {NAMES.cluster_queue} at 06:01:00 UTC; waiting for its pods "
                                      "(if they are not all ready by 06:21:00 UTC")
    head, workers = fake.workload_of("a")["status"]["admission"]["podSetAssignments"]
    # The head's cpu and memory under the host flavor; the workers' chips under the slice's, their cpu and memory
    # the host's: 8 hosts x 4 chips, x 8 cpu, x 200G (written as Kueue writes a byte count, in Ki).
    assert head == {"name": "head", "count": 1, "flavors": {"cpu": NAMES.host_flavor, "memory": NAMES.host_flavor},
                    "resourceUsage": {"cpu": "8", "memory": "16Gi"}}
    assert workers == {"name": "tpu-group", "count": 8,
                       "flavors": {"cpu": NAMES.host_flavor, kueue.TPU: NAMES.tpu_flavor, "memory": NAMES.host_flavor},
                       "resourceUsage": {"cpu": "64", kueue.TPU: "32", "memory": f"{8 * 200 * 10**9 // 1024}Ki"}}
    # Kueue put the flavors' node labels and tolerations on the pods: the TPU flavor's on the workers only.
    cluster = kube.ray_jobs["a"]["spec"]["rayClusterSpec"]
    assert "cloud.google.com/gke-tpu-accelerator" not in cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"]
    worker_pod = cluster["workerGroupSpecs"][0]["template"]["spec"]
    assert worker_pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4"
    assert {"key": kueue.TPU, "operator": "Exists", "effect": "NoSchedule"} in worker_pod["tolerations"]
    for _ in range(10):  # the head and 8 TPU hosts, one a minute, then KubeRay posts the job
        read(fake, "a")
    assert kube.ray_jobs["a"]["status"]["jobDeploymentStatus"] == "Running"
    read(fake, "a")
    assert line(fake, "a") == f"admitted by {NAMES.cluster_queue}; all its pods are ready"


def test_two_runs_compete_for_one_queue_and_the_second_starts_when_the_first_ends():
    jobs = FakeJobsClient(final="RUNNING")
    kube = FakeKubeRay(jobs)
    fake = queue(kube)
    submit(fake, "first")
    submit(fake, "second")
    for _ in range(12):
        read(fake, "first")
    assert kube.ray_jobs["first"]["status"]["jobDeploymentStatus"] == "Running"
    assert kube.ray_jobs["second"]["spec"]["suspend"] is True and "second-x7k2p" not in kube.clusters
    # Kueue names every resource the run lacks: the chips, and the workers' cpu and memory the first run's workers
    # hold (the queue has them for two slices' workers and two heads; the head fits).
    assert line(fake, "second") == (
        "queued in maxtext-tpu-cluster: couldn't assign flavors to pod set tpu-group: insufficient unused quota for "
        f"cpu in flavor {NAMES.host_flavor}, 64 more needed, insufficient unused quota for google.com/tpu in flavor "
        f"{NAMES.tpu_flavor}, 32 more needed, insufficient unused quota for memory in flavor {NAMES.host_flavor}, "
        f"{8 * 200 * 10**9 // 1024}Ki more needed")
    # The first run ends; its Workload finishes and the chips go to the second.
    jobs.jobs["first"] = "SUCCEEDED"
    read(fake, "first")
    read(fake, "second")
    assert line(fake, "first").startswith("finished (Succeeded)")
    assert kube.ray_jobs["second"]["spec"]["suspend"] is False
    assert line(fake, "second").startswith(f"admitted by {NAMES.cluster_queue}")


@pytest.mark.parametrize("strategy, admitted", [(kueue.STRICT_FIFO, set()), (kueue.BEST_EFFORT_FIFO, {"small"})])
def test_a_run_too_big_for_the_chips_left_holds_back_the_runs_behind_it_only_under_strict_fifo(strategy, admitted):
    kube = FakeKubeRay(FakeJobsClient(final="RUNNING"))
    fake = queue(kube, strategy)
    submit(fake, "one", slices=1)
    read(fake, "one")
    submit(fake, "two", slices=2)  # 32 chips: 16 are left
    submit(fake, "small", slices=1)
    read(fake, "one")
    started = {name for name in ("two", "small") if kube.ray_jobs[name]["spec"]["suspend"] is False}
    assert started == admitted
    if strategy == kueue.STRICT_FIFO:  # never tried: no reason of its own, only its place
        assert line(fake, "small") == "queued in maxtext-tpu-cluster, behind the runs before it"


def test_a_run_whose_second_slice_never_comes_is_evicted_at_the_timeout_and_requeued_after_its_backoff():
    kube = FakeKubeRay(FakeJobsClient(final="RUNNING"), slices_that_come=1)
    fake = queue(kube, timeout_s=600, backoff_base_s=120)
    submit(fake, "a")
    read(fake, "a")
    cluster = kube.ray_jobs["a"]["status"]["rayClusterName"]
    for _ in range(9):  # 06:02 to 06:10: the head and slice 0 come, slice 1 never
        read(fake, "a")
    up = [p for p in kube.pods.values() if p.status.phase == "Running"]
    assert len(up) == 1 + 4 and kube.ray_jobs["a"]["status"]["jobDeploymentStatus"] == "Initializing"
    assert fake.evictions == []
    read(fake, "a")  # 06:11: ten minutes after admission
    assert fake.evictions == [fake.workload_of("a")["metadata"]["name"]]
    assert kube.ray_jobs["a"]["spec"]["suspend"] is True
    assert cluster not in kube.clusters and kube.pods == {}  # KubeRay deleted the cluster: slice 0 is released
    assert line(fake, "a") == ("evicted for slow slices (its pods were not all ready in time); KubeRay is deleting "
                               "its cluster")
    read(fake, "a")  # the quota is released once the RayJob is suspended
    assert line(fake, "a") == ("evicted for slow slices (its pods were not all ready in time); back in the queue at "
                               "06:13:00 UTC (in 60 s) (requeue 1)")
    assert "admission" not in fake.workload_of("a")["status"]
    read(fake, "a")  # 06:13: the backoff is over, the run is admitted again and gets a new cluster
    assert kube.ray_jobs["a"]["spec"]["suspend"] is False
    read(fake, "a")
    assert kube.ray_jobs["a"]["status"]["rayClusterName"] not in ("", cluster)
    evicted = kueue_condition(fake, "a", "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("False", "QuotaReserved")


def test_after_its_requeue_limit_a_run_is_deactivated_and_says_so():
    kube = FakeKubeRay(FakeJobsClient(final="RUNNING"), slices_that_come=1)
    fake = queue(kube, timeout_s=600, requeue_limit=1, backoff_base_s=60)
    submit(fake, "a")
    for _ in range(40):
        read(fake, "a")
    workload = fake.workload_of("a")
    assert len(fake.evictions) == 1 and workload["spec"]["active"] is False
    assert kube.ray_jobs["a"]["spec"]["suspend"] is True and kube.pods == {}
    assert line(fake, "a") == (
        "given up: Kueue deactivated the run after 1 requeue (The workload is deactivated due to exceeding the maximum "
        "number of re-queuing retries); delete its RayJob, or set its Workload's spec.active to true to queue it again")


def test_the_webhook_refuses_a_queued_run_that_keeps_its_cluster():
    from kubernetes import client as k8s

    fake = queue(FakeKubeRay(FakeJobsClient()))
    job = queued_job("a")
    job["spec"]["shutdownAfterJobFinishes"] = False
    job["spec"].pop("ttlSecondsAfterFinished")
    with pytest.raises(k8s.ApiException, match="must delete its cluster when it ends"):
        fake.custom.create_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", job)
    assert fake.workloads == {} and fake.kube.ray_jobs == {}


def kueue_condition(fake: FakeKueue, name: str, kind: str) -> dict:
    return next(c for c in fake.workload_of(name)["status"]["conditions"] if c["type"] == kind)


def test_while_an_evicted_run_backs_off_the_run_behind_it_takes_the_chips_and_the_requeued_run_waits_for_them():
    kube = FakeKubeRay(FakeJobsClient(final="RUNNING"), slices_that_come=1)
    fake = queue(kube, timeout_s=600, backoff_base_s=120)
    submit(fake, "big")  # 2 slices: its second never comes
    submit(fake, "small", slices=1)
    for _ in range(12):  # 06:01 to 06:12: big is admitted, holds every chip, times out at 06:11 and releases them
        read(fake, "big")
    read(fake, "small")
    assert kube.ray_jobs["small"]["spec"]["suspend"] is False
    assert fake.evictions == [fake.workload_of("big")["metadata"]["name"]]
    for _ in range(6):
        read(fake, "small")
    assert kube.ray_jobs["small"]["status"]["jobDeploymentStatus"] == "Running"
    assert line(fake, "big") == (
        "evicted for slow slices (its pods were not all ready in time); requeued (requeue 1), queued in "
        "maxtext-tpu-cluster: couldn't assign flavors to pod set tpu-group: insufficient unused quota for "
        f"cpu in flavor {NAMES.host_flavor}, 32 more needed, insufficient unused quota for google.com/tpu in flavor "
        f"{NAMES.tpu_flavor}, 16 more needed, insufficient unused quota for memory in flavor {NAMES.host_flavor}, "
        f"{4 * 200 * 10**9 // 1024}Ki more needed")
