"""TpuQueue under the mock engine, used from Python as another stack would: Kueue installed from its chart at the
pinned version with the stack's waiting settings, or an existing Kueue used; the flavor, ClusterQueue and
LocalQueue derived from the RayTpuCluster it is given, every one valid against Kueue's CRDs; children parented,
given the provider, ordered after what they need; bad arguments refused before anything is registered."""

from __future__ import annotations

import pytest
import yaml

from gke_ray_tpu.core import kueue
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.mock_engine import OfflineRun, run_offline
from tests.schemas import validate_kueue

PROGRAM = """
import pulumi
import pulumi_kubernetes as k8s
from gke_ray_tpu.components import GcsWorkloadIdentity, GcsWorkloadIdentityArgs, RayTpuCluster, RayTpuClusterArgs, TpuQueue, TpuQueueArgs

cluster_k8s = k8s.Provider("team-gke", kubeconfig="{{}}")
storage = GcsWorkloadIdentity("storage", GcsWorkloadIdentityArgs(
    bucket_name="team-ckpt", location="us-east5", project="my-project", project_number="123", namespace="training",
    ksa_name="trainer"), opts=pulumi.ResourceOptions(providers=[cluster_k8s]))
ray = RayTpuCluster("ray", RayTpuClusterArgs(workload_identity=storage, ray_cluster_name="team-tpus", {cluster}),
                    opts=pulumi.ResourceOptions(providers=[cluster_k8s]))
queue = TpuQueue("queue", TpuQueueArgs(ray_cluster=ray, {queue}), opts=pulumi.ResourceOptions(providers=[cluster_k8s]))
pulumi.export("localQueue", queue.local_queue)
pulumi.export("tpuQuota", queue.tpu_quota)
pulumi.export("podsReadyTimeoutS", queue.pods_ready_timeout_s)
pulumi.export("kueueVersion", queue.kueue_version)
"""
CUSTOM = "kubernetes:{}:{}"
CHART = "kubernetes:helm.sh/v4:Chart"
NAMES = kueue.queue_names("team-tpus", "training", "key")


def run_program(tmp_path, cluster: str, queue: str = "") -> OfflineRun:
    program = tmp_path / "__main__.py"
    program.write_text(PROGRAM.format(cluster=cluster, queue=queue))
    return run_offline({}, program=program, project="tpu-queue")


def kueue_objects(run: OfflineRun) -> dict:
    found = {r.inputs["kind"]: r for r in run.resources if r.type.startswith("kubernetes:kueue.x-k8s.io/v1beta2:")}
    for resource in found.values():
        validate_kueue(resource.inputs)
    return found


def short(urns) -> set[str]:
    return {urn.rsplit("::", 1)[1] for urn in urns}


@pytest.fixture(scope="module")
def spot(tmp_path_factory) -> OfflineRun:
    return run_program(tmp_path_factory.mktemp("spot"), 'num_slices=2, capacity="spot", scale_to_zero=True',
                       "pods_ready_timeout_s=900")


def test_kueue_is_installed_from_its_chart_at_the_pinned_version_with_the_stacks_wait(spot):
    chart = spot.one(CHART).inputs
    assert (chart["chart"], chart["version"], chart["namespace"]) == (
        "oci://registry.k8s.io/kueue/charts/kueue", "0.19.2", "kueue-system")
    config = yaml.safe_load(chart["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["waitForPodsReady"]["timeout"] == "900s"
    assert config["waitForPodsReady"]["requeuingStrategy"]["backoffLimitCount"] == 3
    assert {"ray.io/rayjob", "ray.io/raycluster"} <= set(config["integrations"]["frameworks"])
    # The stack's v6e pods claim 2 DCN NICs each through DRANET, which the installed Kueue neither counts nor refuses.
    assert "deviceClassMappings" not in config["resources"]
    assert chart["values"]["controllerManager"]["featureGates"] == [
        {"name": "KueueDRAIntegration", "enabled": False}, {"name": "KueueDRARejectWorkloadsWhenDRADisabled", "enabled": False}]
    assert spot.one("kubernetes:core/v1:Namespace").inputs["metadata"] == {"name": "kueue-system"}
    assert (spot.outputs["kueueVersion"], spot.outputs["podsReadyTimeoutS"]) == ("0.19.2", 900)


def test_the_queue_holds_the_stacks_slices_for_its_namespace(spot):
    objects = kueue_objects(spot)
    assert set(objects) == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    assert objects["ResourceFlavor"].inputs["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-spot": "true"}
    queue = objects["ClusterQueue"].inputs
    assert queue["metadata"] == {"name": "team-tpus-training"}
    # 2 slices x 4 hosts x 4 chips; cpu, memory and the NICs the hosts claim are not counted.
    assert queue["spec"]["resourceGroups"] == [{"coveredResources": ["google.com/tpu"], "flavors": [
        {"name": NAMES.tpu_flavor, "resources": [{"name": "google.com/tpu", "nominalQuota": 32}]}]}]
    assert queue["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "training"}}
    assert objects["LocalQueue"].inputs["metadata"] == {"name": "team-tpus", "namespace": "training"}
    assert objects["LocalQueue"].inputs["spec"] == {"clusterQueue": "team-tpus-training"}
    assert (spot.outputs["localQueue"], spot.outputs["tpuQuota"]) == ("team-tpus", 32)


def test_every_child_is_parented_takes_the_provider_and_waits_for_what_it_needs(spot):
    component = spot.one("gke-ray-tpu:index:TpuQueue")
    children = [r for r in spot.resources if r.parent == component.urn]
    assert {r.type for r in children} == {CHART, "kubernetes:core/v1:Namespace",
                                          *(f"kubernetes:kueue.x-k8s.io/v1beta2:{k}" for k in
                                            ("ResourceFlavor", "ClusterQueue", "LocalQueue"))}
    provider = spot.one("pulumi:providers:kubernetes", "team-gke")
    assert {r.provider for r in children} == {f"{provider.urn}::team-gke-id"}  # a provider reference: URN::ID
    objects = kueue_objects(spot)
    assert short(spot.one(CHART).dependencies) == {"queue-kueue-namespace"}
    assert "queue-kueue" in short(objects["ResourceFlavor"].dependencies)
    assert {"queue-kueue", "queue-tpu-flavor"} <= short(objects["ClusterQueue"].dependencies)
    assert "queue-cluster-queue" in short(objects["LocalQueue"].dependencies)


def test_an_existing_kueue_is_used_as_it_is_and_its_queue_counts_cpu_and_memory_too(tmp_path):
    run = run_program(tmp_path, 'num_slices=1, dcn_interfaces=0, scale_to_zero=True, capacity="flex-start"',
                      'install_kueue=False, cohort="research", borrowing_limit=16, queueing_strategy="BestEffortFIFO"')
    assert run.of_type(CHART) == [] and run.of_type("kubernetes:core/v1:Namespace") == []
    objects = kueue_objects(run)
    queue = objects["ClusterQueue"].inputs["spec"]
    tpu, host = queue["resourceGroups"]
    assert tpu["flavors"][0]["resources"] == [{"name": "google.com/tpu", "nominalQuota": 16, "borrowingLimit": 16}]
    # One slice: a head (8 cpu, 16Gi) for the one run it holds, and 4 workers of 8 cpu and 200G.
    assert host["flavors"][0]["resources"] == [{"name": "cpu", "nominalQuota": 40},
                                                {"name": "memory", "nominalQuota": 16 * 2**30 + 4 * 200 * 10**9}]
    assert (queue["cohortName"], queue["queueingStrategy"]) == ("research", "BestEffortFIFO")
    assert run.outputs["podsReadyTimeoutS"] is None and run.outputs["kueueVersion"] is None


def test_a_one_slice_flex_start_stack_may_wait_for_gkes_queued_provisioning(tmp_path):
    run = run_program(tmp_path, 'num_slices=1, dcn_interfaces=0, capacity="flex-start"', "queued_provisioning=True")
    objects = kueue_objects(run)
    assert objects["AdmissionCheck"].inputs["spec"]["parameters"]["name"] == NAMES.admission_check
    assert objects["ProvisioningRequestConfig"].inputs["spec"]["managedResources"] == ["google.com/tpu"]
    assert objects["ClusterQueue"].inputs["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["name"] == (
        NAMES.admission_check)
    assert {t["key"] for t in objects["ResourceFlavor"].inputs["spec"]["tolerations"]} == {
        "google.com/tpu", "cloud.google.com/gke-queued"}


@pytest.mark.parametrize("cluster, queue, key, expected", [
    ("num_slices=2", "", "TpuQueueArgs.ray_cluster", "scale_to_zero"),
    ('num_slices=2, capacity="flex-start"', "queued_provisioning=True", "TpuQueueArgs.queued_provisioning",
     "one pod set per request"),
    ("num_slices=2, scale_to_zero=True", "install_kueue=False, pods_ready_timeout_s=600",
     "TpuQueueArgs.pods_ready_timeout_s", "an existing Kueue keeps its own settings"),
    ("num_slices=2, scale_to_zero=True", "borrowing_limit=8", "TpuQueueArgs.borrowing_limit", "within a cohort"),
    ("num_slices=2, scale_to_zero=True", 'queueing_strategy="FIFO"', "TpuQueueArgs.queueing_strategy", "StrictFIFO"),
    ("num_slices=2, scale_to_zero=True", "pods_ready_timeout_s=5", "TpuQueueArgs.pods_ready_timeout_s", ">= 60"),
    ('num_slices=2, scale_to_zero=True, compute_class="tpu-class"', "install_kueue=False", "TpuQueueArgs.ray_cluster",
     "allocationMode All"),
])
def test_bad_arguments_are_refused_before_anything_is_registered(tmp_path, cluster, queue, key, expected):
    run = OfflineRun()
    program = tmp_path / "__main__.py"
    program.write_text(PROGRAM.format(cluster=cluster, queue=queue))
    with pytest.raises(ConfigError) as error:
        run_offline({}, program=program, project="tpu-queue", run=run)
    assert error.value.key == key and expected in error.value.expected, error.value
    assert not [r for r in run.resources if r.type == "gke-ray-tpu:index:TpuQueue"]
