"""Every RayJob a run of a scale-to-zero stack becomes: valid for KubeRay's CRD, owning and deleting its cluster,
and within Kueue's rules for a RayJob it manages; in a queue, an elastic run's cluster starts on its minimum and
grows, its Kubernetes API token in Ray's autoscaler alone."""

from __future__ import annotations

import copy

import pytest

from gke_ray_tpu.components.maxtext_run import build_run_job, run_description
from gke_ray_tpu.components.ray_manifests import ray_cluster_spec
from gke_ray_tpu.components.ray_tpu_cluster import cluster_ref, spec_from_args
from gke_ray_tpu.core import kueue, kueue_quota, quantities
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kuberay import ray_job_problems
from gke_ray_tpu.core.ray_job import JobCommand, OwnCluster, RayJobRun, ray_job
from tests.schemas import validate_ray_cluster, validate_ray_job

IDENTITY = {"bucket_name": "team-ckpt", "ksa_name": "trainer", "namespace": "training"}

CLUSTERS = {
    "v6e-flex-start-dranet": {"capacity": "flex-start", "num_slices": 2},
    "v6e-spot-elastic": {"capacity": "spot", "num_slices": 3, "elastic_min_slices": 2, "scale_to_zero": True},
    "v5e-single-host": {"generation": "v5e", "topology": "2x2", "num_slices": 1, "scale_to_zero": True},
    "autopilot-spot": {"capacity": "spot", "compute_class": "team-tpu", "scale_to_zero": True},
    "tpu7x-reservation": {"generation": "tpu7x", "topology": "2x2x2", "capacity": "reservation", "scale_to_zero": True},
}


def run_job(cluster_args: dict, **run_args) -> dict:
    spec = spec_from_args({"workload_identity": IDENTITY, **cluster_args})
    assert spec.scale_to_zero
    cluster_spec = ray_cluster_spec(spec)
    # Sharded over whatever chips a slice has: the shapes here differ from the preset's.
    overrides = {"ici_fsdp_parallelism": -1, "ici_tensor_parallelism": 1}
    args = {"run_name": "r", "ray_cluster": cluster_ref(spec, spec.name, cluster_spec), "preset": "llama3-8b",
            "overrides": overrides, **run_args}
    return ray_job(run_description(args, build_run_job(args), "0" * 64, cluster_spec))


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_a_runs_rayjob_passes_the_crd_and_owns_its_cluster(name):
    manifest = run_job(CLUSTERS[name], active_deadline_seconds=3600, backoff_limit=2)
    validate_ray_job(manifest)  # unknown fields refused
    assert ray_job_problems(manifest) == []
    spec = manifest["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0
    assert "clusterSelector" not in spec and "enableInTreeAutoscaling" not in spec["rayClusterSpec"]
    # The same spec as a RayCluster of its own: what KubeRay creates from it passes that CRD too.
    validate_ray_cluster({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                          "metadata": {"name": "r-abcde", "namespace": "training"}, "spec": spec["rayClusterSpec"]})
    # Kueue: one worker group, none named head, all slices in it (GKE's queued provisioning takes one PodSet).
    (group,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert group["groupName"] != "head" and group["replicas"] == CLUSTERS[name].get("num_slices", 2)


def test_the_held_clusters_rayjob_passes_the_crd_and_cannot_retry():
    spec = spec_from_args({"workload_identity": IDENTITY, "capacity": "spot"})
    args = {"run_name": "r", "ray_cluster": cluster_ref(spec, spec.name), "preset": "llama3-8b"}
    manifest = ray_job(run_description(args, build_run_job(args), "0" * 64))
    validate_ray_job(manifest)
    assert ray_job_problems(manifest) == []
    assert ray_job_problems({**manifest, "spec": {**manifest["spec"], "backoffLimit": 1}}) == [
        "backoffLimit > 0 is incompatible with clusterSelector"
    ]


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda c: c["workerGroupSpecs"][0].update(groupName="head"), "a worker group named 'head': Kueue reserves it"),
        (lambda c: c.update(enableInTreeAutoscaling=True), "Ray's autoscaler only as a Kueue elastic job"),
        (lambda c: c["workerGroupSpecs"].extend(copy.deepcopy(c["workerGroupSpecs"]) * 17),
         "19 pod sets: Kueue takes at most 18"),
    ],
    ids=["head-group", "autoscaler", "18-groups"],
)
def test_a_run_cluster_kueue_or_this_design_would_refuse_is_refused_before_it_is_sent(change, problem):
    spec = spec_from_args({"workload_identity": IDENTITY, "capacity": "flex-start"})
    cluster_spec = ray_cluster_spec(spec)
    change(cluster_spec)
    with pytest.raises(ValueError, match=problem):
        ray_job(RayJobRun("r", "training", JobCommand("python -m x", {}, "r-1"), OwnCluster(cluster_spec, 2)))


def test_a_run_name_leaves_room_for_the_name_kuberay_gives_its_multi_host_cluster():
    spec = spec_from_args({"workload_identity": IDENTITY, "capacity": "flex-start"})
    ref = cluster_ref(spec, spec.name, ray_cluster_spec(spec))
    build_run_job({"run_name": "r" * 35, "ray_cluster": ref, "preset": "llama3-8b"})
    with pytest.raises(ConfigError) as error:
        build_run_job({"run_name": "r" * 36, "ray_cluster": ref, "preset": "llama3-8b"})
    assert error.value.key == "MaxTextRunArgs.run_name" and "5 random characters" in str(error.value)
    # A held cluster's RayJob names no cluster: KubeRay's own limit only.
    held = spec_from_args({"workload_identity": IDENTITY})
    build_run_job({"run_name": "r" * 47, "ray_cluster": cluster_ref(held, held.name), "preset": "llama3-8b"})


def test_the_removed_idle_timeout_is_refused_with_what_replaced_it():
    with pytest.raises(ConfigError) as error:
        spec_from_args({"workload_identity": IDENTITY, "capacity": "flex-start", "idle_timeout_s": 600})
    assert error.value.key == "RayTpuClusterArgs.idle_timeout_s"
    assert "each run brings its own RayCluster" in error.value.expected


# --- an elastic run in a queue: a cluster that starts on its minimum and grows ----------------------------------

def elastic_job(queue: str | None = "team-queue") -> dict:
    spec = spec_from_args({"workload_identity": IDENTITY, "capacity": "spot", "num_slices": 3, "elastic_min_slices": 1,
                           "scale_to_zero": True})
    labels = kueue.queue_label(queue) if queue else {}
    return ray_job(RayJobRun("r", "training", JobCommand("python -m x", {}, "r-1"),
                             OwnCluster(ray_cluster_spec(spec), 3, start_slices=1), labels=labels))


def test_an_elastic_run_in_a_queue_starts_on_its_minimum_with_the_autoscaler_and_kueues_elastic_annotation():
    manifest = elastic_job()
    validate_ray_job(manifest)
    assert ray_job_problems(manifest) == []
    assert manifest["metadata"]["annotations"] == {kueue.ELASTIC_JOB_ANNOTATION: "true"}
    cluster = manifest["spec"]["rayClusterSpec"]
    validate_ray_cluster({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r-abcde",
                          "namespace": "training"}, "spec": cluster})
    (group,) = cluster["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 3)
    # libtpu is told the most slices; Ray Train tells each worker group how many it got.
    assert {e["value"] for e in group["template"]["spec"]["containers"][0]["env"] if e["name"] == "MEGASCALE_NUM_SLICES"} == {"3"}
    assert cluster["enableInTreeAutoscaling"] is True
    options = cluster["autoscalerOptions"]
    assert (options["version"], options["idleTimeoutSeconds"]) == ("v2", 3600)
    # Kueue counts the autoscaler sidecar in the head's pod set, as KubeRay gives it: 500m and 512Mi.
    head, workers = kueue_quota.ray_job_pod_sets(manifest)
    assert (head.requests["cpu"], workers.count) == (quantities.quantity("8.5"), 4)
    assert kueue_quota.usage(kueue_quota.ray_job_pod_sets(manifest))[kueue.TPU] == 16
    assert kueue_quota.usage(kueue_quota.ray_job_pod_sets(manifest, grown=True))[kueue.TPU] == 48


def test_the_kubernetes_api_token_is_the_autoscalers_alone():
    cluster = elastic_job()["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    # No token is mounted by the kubelet, and no Ray container mounts the projected one: the driver of every run
    # runs in the head's Ray container.
    assert head["automountServiceAccountToken"] is False
    (token,) = [v for v in head["volumes"] if v["name"] == "autoscaler-api-token"]
    assert [s for s in token["projected"]["sources"] if "serviceAccountToken" in s] == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]
    mounts = [m["name"] for c in head["containers"] for m in c.get("volumeMounts") or []]
    assert "autoscaler-api-token" not in mounts
    # KubeRay adds autoscalerOptions.volumeMounts to the autoscaler's container only (common/pod.go).
    assert cluster["autoscalerOptions"]["volumeMounts"] == [{
        "name": "autoscaler-api-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}]
    assert cluster["autoscalerOptions"]["securityContext"] == head["containers"][0]["securityContext"]
    # Non-elastic runs have neither the autoscaler nor the token.
    static = run_job({"capacity": "spot", "num_slices": 2, "scale_to_zero": True})["spec"]["rayClusterSpec"]
    assert "autoscalerOptions" not in static and "enableInTreeAutoscaling" not in static
    assert not [v for v in static["headGroupSpec"]["template"]["spec"]["volumes"] if "projected" in v]


def test_an_elastic_cluster_outside_a_queue_is_refused():
    with pytest.raises(ValueError, match="runs Ray's autoscaler only as a Kueue elastic job"):
        elastic_job(queue=None)
