"""TpuQueue under the mock engine, used from Python as another stack would: Kueue installed from its chart at the
pinned version with the stack's waiting settings, or an existing Kueue used; the flavor, ClusterQueue and
LocalQueue derived from the RayTpuCluster it is given, every one valid against Kueue's CRDs; children parented,
given the provider, ordered after what they need; bad arguments refused before anything is registered."""

from __future__ import annotations

import pytest
import yaml

from gke_ray_tpu.components import queue_manifests
from gke_ray_tpu.core import kueue, kueue_quota, kueue_waiting
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
    """The queue's Kueue objects by kind; the host's ResourceFlavor as "HostFlavor" (its resource "<queue>-host-flavor")."""
    found: dict = {}
    for r in run.resources:
        if r.type.startswith("kubernetes:kueue.x-k8s.io/v1beta2:"):
            validate_kueue(r.inputs)
            found["HostFlavor" if r.name.endswith("-host-flavor") else r.inputs["kind"]] = r
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
    assert set(objects) == {"ResourceFlavor", "HostFlavor", "ClusterQueue", "LocalQueue"}
    assert objects["ResourceFlavor"].inputs["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-spot": "true"}
    assert objects["HostFlavor"].inputs["metadata"]["name"] == NAMES.host_flavor
    assert objects["HostFlavor"].inputs["spec"] == {}
    queue = objects["ClusterQueue"].inputs
    assert queue["metadata"] == {"name": "team-tpus-training"}
    # 2 slices x 4 hosts x 4 chips; cpu and memory of a head per slice (8, 16Gi) and of the 8 workers (8, 200G);
    # the NICs the hosts claim are not counted (the installed Kueue's DRA accounting is off).
    assert queue["spec"]["resourceGroups"] == [
        {"coveredResources": ["google.com/tpu"], "flavors": [
            {"name": NAMES.tpu_flavor, "resources": [{"name": "google.com/tpu", "nominalQuota": 32}]}]},
        {"coveredResources": ["cpu", "memory"], "flavors": [
            {"name": NAMES.host_flavor, "resources": [
                {"name": "cpu", "nominalQuota": 2 * 8 + 8 * 8},
                {"name": "memory", "nominalQuota": 2 * 16 * 2**30 + 8 * 200 * 10**9}]}]}]
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
    assert {r.name for r in children if r.type.endswith(":ResourceFlavor")} == {"queue-tpu-flavor", "queue-host-flavor"}
    provider = spot.one("pulumi:providers:kubernetes", "team-gke")
    assert {r.provider for r in children} == {f"{provider.urn}::team-gke-id"}  # a provider reference: URN::ID
    objects = kueue_objects(spot)
    assert short(spot.one(CHART).dependencies) == {"queue-kueue-namespace"}
    assert "queue-kueue" in short(objects["ResourceFlavor"].dependencies)
    assert {"queue-kueue", "queue-tpu-flavor", "queue-host-flavor"} <= short(objects["ClusterQueue"].dependencies)
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


# --- the stack's queue ---------------------------------------------------------------------------------------------

QUEUE = "gke-ray-tpu:index:TpuQueue"
RAYJOB = "kubernetes:ray.io/v1:RayJob"


def test_a_stack_whose_runs_bring_their_cluster_queues_them_and_a_held_one_has_no_queue(dev_run, run_stack):
    assert dev_run.of_type(QUEUE) == [] and dev_run.outputs["localQueue"] is None
    flex = run_stack(capacity="flex-start")
    objects = kueue_objects(flex)
    assert objects["LocalQueue"].inputs["metadata"] == {"name": "maxtext-tpu-cluster", "namespace": "default"}
    assert objects["ClusterQueue"].inputs["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "google.com/tpu", "nominalQuota": 32}]  # the dev stack's 2 x 4 hosts x 4 chips
    assert objects["ResourceFlavor"].inputs["spec"]["nodeLabels"]["cloud.google.com/gke-flex-start"] == "true"
    # The declared run carries the queue's label and waits for the LocalQueue (and its deadline lies past Kueue's).
    job = flex.one(RAYJOB)
    assert job.inputs["metadata"]["labels"] == {kueue.QUEUE_LABEL: "maxtext-tpu-cluster"}
    assert "queue-local-queue" in short(job.dependencies)
    assert job.inputs["spec"]["preRunningDeadlineSeconds"] == 1800 + kueue_waiting.QUEUED_DEADLINE_MARGIN_S


@pytest.mark.parametrize("keys, key, expected", [
    ({"cohort": "research"}, "gke-ray-tpu:cohort", "unset on a stack that holds its slices"),
    ({"podsReadyTimeout": "900"}, "gke-ray-tpu:podsReadyTimeout", "unset on a stack that holds its slices"),
    ({"capacity": "flex-start", "queuedProvisioning": "true"}, "gke-ray-tpu:queuedProvisioning",
     "false for 2 flex-start slice(s)"),
    ({"capacity": "spot", "scaleToZero": "true", "numSlices": "1", "queuedProvisioning": "true"},
     "gke-ray-tpu:queuedProvisioning", "false for 1 spot slice(s)"),
    ({"capacity": "flex-start", "borrowingLimit": "16"}, "gke-ray-tpu:borrowingLimit", "within a cohort"),
    ({"capacity": "flex-start", "installKueue": "false", "requeueLimit": "2"}, "gke-ray-tpu:requeueLimit",
     "an existing Kueue keeps its own settings"),
    ({"capacity": "flex-start", "podsReadyTimeout": "30"}, "gke-ray-tpu:podsReadyTimeout", ">= 60"),
    ({"capacity": "flex-start", "rayClusterName": "a" * 41, "namespace": "n" * 20}, "gke-ray-tpu:rayClusterName",
     "Kueue"),
])
def test_the_queues_keys_are_refused_where_they_do_not_apply_naming_the_key(dev_config, keys, key, expected):
    from tests.conftest import with_keys

    run = OfflineRun()
    with pytest.raises(ConfigError) as error:
        run_offline(with_keys(dev_config, **keys), run=run)
    assert error.value.key == key and expected in error.value.expected, error.value
    assert run.of_type(QUEUE) == []


def test_one_flex_start_slice_may_come_through_queued_provisioning(run_stack):
    run = run_stack(capacity="flex-start", numSlices="1", queuedProvisioning="true", maxRunDuration="86400")
    pool = run.one("gcp:container/nodePool:NodePool", "slice-0-pool")
    assert pool.inputs["queuedProvisioning"] == {"enabled": True}
    objects = kueue_objects(run)
    assert objects["ProvisioningRequestConfig"].inputs["spec"]["parameters"] == {"maxRunDurationSeconds": "86400"}
    assert objects["ClusterQueue"].inputs["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["name"] == (
        "maxtext-tpu-cluster-default-provisioning")
    # Waiting bills nothing there: GKE brings the slice whole before Kueue admits the run.
    said = "\n".join(message for level, message in run.logs if "can be billed while it waits" in message)
    assert "flex-start   $0: queued provisioning admits the run only once GKE has every slice" in said
    assert "queuedProvisioning" not in run_stack(capacity="flex-start").one(
        "gcp:container/nodePool:NodePool", "slice-0-pool").inputs


def test_an_existing_kueue_is_read_at_preview_and_one_without_v1beta2_is_refused(dev_config, run_stack):
    from gke_ray_tpu.stack.mock_engine import MockGke, mock_clusterqueue_crd
    from tests.conftest import with_keys

    existing = run_stack(capacity="flex-start", installKueue="false")
    assert existing.of_type(CHART) == [] and existing.outputs["podsReadyTimeoutS"] is None
    crd = "CustomResourceDefinition::queue-served-clusterqueue-crd"
    assert [urn for urn in kueue_objects(existing)["ClusterQueue"].dependencies if urn.endswith(crd)]
    old = {**mock_clusterqueue_crd(), "versions": [{"name": "v1beta1", "served": True, "storage": True}]}
    run = OfflineRun()
    with pytest.raises(ValueError, match=r"TpuQueueArgs.install_kueue=False: expected a cluster whose Kueue serves "
                                         r"kueue.x-k8s.io/v1beta2 \(Kueue >= 0.16\): its clusterqueues.kueue.x-k8s.io "
                                         r"CRD serves v1beta1"):
        run_offline(with_keys(dev_config, capacity="flex-start", installKueue="false"), run=run,
                    gke=MockGke(served_clusterqueue_crd=old))
    assert [r for r in run.resources if r.type == "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"] == []


def test_preview_says_what_waiting_for_slices_can_bill_per_capacity_mode(run_stack):
    run = run_stack(capacity="spot", scaleToZero="true")
    [said] = [message for level, message in run.logs if "can be billed while it waits" in message]
    # Worked by hand: 4 admissions (3 requeues) x 1 slice (the second never comes) x (1800 + 600) s = 2.67 slice-hours;
    # a v6e-16 is 16 chips at $2.70 (on demand) or $1.08 (Spot) a chip-hour in us-east5.
    assert "on-demand    $115.20: 4 admission(s) x 1 slice(s) x 40 min = 2.67 slice-hours" in said
    assert "spot         $46.08: 4 admission(s) x 1 slice(s) x 40 min = 2.67 slice-hours  <- this stack" in said
    assert "flex-start   at most $115.20" in said and "reservation  $0" in said
    one = [m for level, m in run_stack(capacity="spot", scaleToZero="true", numSlices="1").logs
           if "can be billed while it waits" in m][0]
    assert "spot         $0: GKE brings a slice up whole" in one
    held = [m for level, m in run_stack().logs if "can be billed while it waits" in m]
    assert held == []  # a held stack's slices are up whether a run waits or not


def test_from_another_language_the_queue_takes_the_clusters_fields_and_a_run_the_queues(tmp_path):
    """What the provider passes: the RayTpuCluster's fields (its name an output, known once it exists) and, to a
    MaxTextRun, the TpuQueue's; the same objects as from Python."""
    program = tmp_path / "__main__.py"
    program.write_text(PROGRAM.format(cluster='num_slices=2, elastic_min_slices=1, capacity="spot", scale_to_zero=True',
                                      queue="").replace("TpuQueueArgs(ray_cluster=ray,", "TpuQueueArgs(ray_cluster=dict(ray.ref),")
                       + "\nfrom gke_ray_tpu.components import MaxTextRun\n"
                       "MaxTextRun('run', {'run_name': 'r', 'ray_cluster': dict(ray.ref), 'queue': dict(queue.ref), "
                       "'elastic': True, 'min_slices': 1, 'overrides': {'steps': 2}}, "
                       "opts=pulumi.ResourceOptions(providers=[cluster_k8s]))\n")
    run = run_offline({}, program=program, project="tpu-queue")
    objects = kueue_objects(run)
    assert objects["LocalQueue"].inputs["metadata"] == {"name": "team-tpus", "namespace": "training"}
    assert objects["ClusterQueue"].inputs["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "google.com/tpu", "nominalQuota": 32}]
    job = run.one("kubernetes:ray.io/v1:RayJob")
    assert job.inputs["metadata"]["labels"] == {kueue.QUEUE_LABEL: "team-tpus"}
    assert job.inputs["metadata"]["annotations"] == {kueue.ELASTIC_JOB_ANNOTATION: "true"}
    assert job.inputs["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert "queue-local-queue" in short(job.dependencies)


def test_a_queue_that_could_never_admit_a_run_fails_preview_naming_the_key(dev_config):
    import copy

    from gke_ray_tpu.components import tpu_queue
    from gke_ray_tpu.stack.checks import check_queue_admits
    from gke_ray_tpu.stack.parse import parse_stack_config
    from gke_ray_tpu.stack.plan import plan_stack
    from tests.conftest import with_keys

    def declared(plan):
        spec = plan.cluster_spec
        return tpu_queue.queue_objects(plan.queue_args, spec, kueue.queue_names(spec.name, spec.namespace, "key"))

    def changed(objects, change):
        objects = copy.deepcopy(objects)
        change(objects.cluster_queue["spec"]["resourceGroups"])
        return objects

    plan = plan_stack(parse_stack_config(with_keys(dev_config, capacity="flex-start")))
    check_queue_admits(plan)  # the queue the stack declares admits every run
    objects = declared(plan)
    # 16 chips: the declared run's two slices never fit.
    smaller = changed(objects, lambda groups: groups[0]["flavors"][0]["resources"][0].update(nominalQuota=16))
    with pytest.raises(ConfigError) as error:
        check_queue_admits(plan, smaller)
    assert (error.value.key, error.value.value) == ("gke-ray-tpu:runs[0]", "baseline-8b")
    assert ("couldn't assign flavors to pod set tpu-group: insufficient quota for google.com/tpu in flavor "
            f"{objects.flavors[0]['metadata']['name']}, previously considered podsets requests (0) + current podset "
            "request (32) > maximum capacity (16)") in error.value.expected
    # The chips alone, as the stack once declared its queue: the head takes no flavor, no run is ever admitted.
    chips_only = changed(objects, lambda groups: groups.pop(1))
    with pytest.raises(ConfigError, match="pod set head asks for cpu, memory, none of which ClusterQueue"):
        check_queue_admits(plan, chips_only)
    # No declared run, and 72 cpu: a run of 2 slices fits (a head of 8 and 8 workers of 8), but not the submit
    # command's elastic one, whose head has the autoscaler's 500m beside it.
    bare = plan_stack(parse_stack_config(with_keys(dev_config, capacity="flex-start", runs=None)))
    tight = changed(declared(bare), lambda groups: groups[1]["flavors"][0]["resources"][0].update(nominalQuota=72))
    with pytest.raises(ConfigError) as error:
        check_queue_admits(bare, tight)
    assert (error.value.key, error.value.value) == ("gke-ray-tpu:elasticMinSlices", 1)
    assert error.value.expected.endswith(
        "it never admits --slices 2 --elastic (from 1): couldn't assign flavors to pod set tpu-group: insufficient "
        f"quota for cpu in flavor {objects.flavors[1]['metadata']['name']}, previously considered podsets requests "
        "(8500m) + current podset request (64) > maximum capacity (72)")
