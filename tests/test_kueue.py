"""core.kueue and the modules beside it: the queue's objects against Kueue's CRDs (v0.19.2), the quota arithmetic Kueue applies to a RayJob,
Kueue's RayJob webhook rules, the refusal of a run no queue could admit, the bound on what waiting for slices
costs, and Workloads read back as one line. Expected numbers are worked out by hand in the comments."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from decimal import Decimal

import pytest
import yaml

from gke_ray_tpu.components.ray_manifests import RayClusterSpec, ray_cluster_spec, resource_claim_template
from gke_ray_tpu.components import kueue_config, queue_manifests
from gke_ray_tpu.core import kueue, kueue_admission, kueue_quota, kueue_waiting, quantities
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.capacity import CAPACITY
from gke_ray_tpu.core.kuberay import ray_job_problems
from gke_ray_tpu.core.ray_job import SUBMISSION_MODE, JobCommand, OwnCluster, RayJobRun, ray_job, with_slices
from gke_ray_tpu.core.tpu_catalogue import slice_shape
from gke_ray_tpu.training.driver import queue_status
from tests.schemas import validate_kueue, validate_ray_job

NAMES = kueue.queue_names("maxtext-tpu-cluster", "default", "gke-ray-tpu:rayClusterName")
NOW = datetime(2026, 12, 4, 6, 30, 0, tzinfo=timezone.utc)


def spec(slices: int = 2, dcn: int = 0, **changes) -> RayClusterSpec:
    fields = dict(name="run", namespace="default", service_account="ray-ksa", bucket_name="ckpt",
                  shape=slice_shape("v6e", "4x4"), num_slices=slices, elastic_min_slices=slices, dcn_interfaces=dcn,
                  image="rayproject/ray:2.60.0-py312", megascale_port=9915, compute_class=None, capacity=CAPACITY["spot"],
                  scale_to_zero=True)
    return RayClusterSpec(**{**fields, **changes})


def job(cluster: dict, **spec_changes) -> dict:
    """A queued run of the one builder, bringing ``cluster`` with as many slices as its group has."""
    (group,) = cluster["workerGroupSpecs"]
    manifest = ray_job(RayJobRun("r", "default", JobCommand("python -m train", {}, "r"),
                                 OwnCluster(cluster, group["replicas"]), labels=kueue.queue_label(NAMES.local_queue)))
    manifest["spec"].update(spec_changes)
    return manifest


# --- quantities and names ---

@pytest.mark.parametrize("text, value", [("8", 8), ("500m", Decimal("0.5")), ("16Gi", 16 * 2**30),
                                         ("200G", 200 * 10**9), ("1e3", 1000), ("1.5k", 1500), (4, 4)])
def test_quantities_read_as_kubernetes_writes_them(text, value):
    assert quantities.quantity(text) == value


def test_a_quantity_that_is_none_is_refused():
    with pytest.raises(ValueError, match="not a Kubernetes quantity: '8 cores'"):
        quantities.quantity("8 cores")


def test_names_are_derived_once_and_a_name_too_long_names_the_setting():
    assert (NAMES.local_queue, NAMES.cluster_queue, NAMES.tpu_flavor) == (
        "maxtext-tpu-cluster", "maxtext-tpu-cluster-default", "maxtext-tpu-cluster-default-tpu")
    with pytest.raises(ConfigError) as error:
        kueue.queue_names("a" * 41, "b" * 14, "gke-ray-tpu:rayClusterName")  # 56 + "-provisioning" > 63
    assert error.value.key == "gke-ray-tpu:rayClusterName" and "Kueue admission check name" in error.value.expected


# --- the queue's objects, against Kueue's CRDs ---

def test_the_slice_flavor_selects_the_shape_and_tolerates_the_tpu_taint():
    flavor = queue_manifests.tpu_flavor(NAMES, slice_shape("v6e", "4x4"), "cloud.google.com/gke-spot", queued=False)
    validate_kueue(flavor)
    assert flavor["spec"] == {
        "nodeLabels": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "4x4",
                       "cloud.google.com/gke-spot": "true"},
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    queued = queue_manifests.tpu_flavor(NAMES, slice_shape("v6e", "4x4"), "cloud.google.com/gke-flex-start", queued=True)
    validate_kueue(queued)
    assert queued["spec"]["tolerations"][1]["key"] == "cloud.google.com/gke-queued"
    validate_kueue(queue_manifests.host_flavor(NAMES))


HEAD = {"cpu": 8, "memory": 16 * 2**30}
WORKER = {"cpu": 8, "memory": 200 * 10**9}
"""The tutorial's requests (``ray_manifests``), worked with by hand below."""


def test_the_dev_stacks_queue_holds_its_chips_and_its_heads_and_workers_cpu_and_memory():
    # 2 slices x 4 hosts x 4 chips; a head per slice (a run holds one at least) and every worker.
    quota = kueue_quota.queue_quota(ray_cluster_spec(spec()), 2, SUBMISSION_MODE)
    assert quota == {kueue.TPU: 32, "cpu": 2 * 8 + 8 * 8, "memory": 2 * HEAD["memory"] + 8 * WORKER["memory"]}
    queue = queue_manifests.cluster_queue(NAMES, "default", quota)
    validate_kueue(queue)
    # The chips under the slice's flavor, cpu and memory in a group of their own under the host flavor.
    assert queue["spec"]["resourceGroups"] == [
        {"coveredResources": ["google.com/tpu"], "flavors": [
            {"name": NAMES.tpu_flavor, "resources": [{"name": "google.com/tpu", "nominalQuota": 32}]}]},
        {"coveredResources": ["cpu", "memory"], "flavors": [
            {"name": NAMES.host_flavor, "resources": [{"name": "cpu", "nominalQuota": 80},
                                                      {"name": "memory", "nominalQuota": 1634359738368}]}]}]
    assert queue["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "default"}}
    assert queue["spec"]["queueingStrategy"] == "StrictFIFO" and "cohortName" not in queue["spec"]
    validate_kueue(queue_manifests.local_queue(NAMES, "default"))


def test_an_elastic_stacks_queue_holds_heads_with_the_autoscaler_beside_them():
    largest = with_slices(ray_cluster_spec(spec()), 2, start_slices=1)
    quota = kueue_quota.queue_quota(largest, 2, SUBMISSION_MODE)
    assert quota["cpu"] == 2 * (8 + Decimal("0.5")) + 8 * 8
    assert quota["memory"] == 2 * (HEAD["memory"] + 512 * 2**20) + 8 * WORKER["memory"]
    assert quota[kueue.TPU] == 32  # the cluster grown to its 2 slices


def test_a_queue_for_a_kueue_that_counts_claims_covers_the_workers_nics_too():
    template = resource_claim_template(spec(dcn=2))
    quota = kueue_quota.queue_quota(ray_cluster_spec(spec(dcn=2)), 2, SUBMISSION_MODE,
                                    claim_templates={template["metadata"]["name"]: template})
    # NICs: 8 workers x 2.
    assert quota == {kueue.TPU: 32, kueue.DCN_NIC: 16, "cpu": 80, "memory": 2 * 16 * 2**30 + 8 * 200 * 10**9}
    queue = queue_manifests.cluster_queue(NAMES, "default", quota, sharing=queue_manifests.Sharing("research", borrowing_limit=16))
    validate_kueue(queue)
    tpu_group, host_group = queue["spec"]["resourceGroups"]
    assert tpu_group["coveredResources"] == ["google.com/tpu", "dcn-nic"]
    assert tpu_group["flavors"][0]["resources"][0] == {"name": "google.com/tpu", "nominalQuota": 32, "borrowingLimit": 16}
    assert host_group["flavors"][0]["resources"] == [{"name": "cpu", "nominalQuota": 80},
                                                      {"name": "memory", "nominalQuota": 1634359738368}]
    assert queue["spec"]["cohortName"] == "research"


def test_queued_provisioning_asks_gke_for_the_tpu_pod_set_only():
    check, config = queue_manifests.admission_check(NAMES), queue_manifests.provisioning_request_config(NAMES, max_run_duration_s=3600)
    validate_kueue(check)
    validate_kueue(config)
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"] == {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                           "name": config["metadata"]["name"]}
    assert config["spec"] == {"provisioningClassName": "queued-provisioning.gke.io", "managedResources": ["google.com/tpu"],
                              "parameters": {"maxRunDurationSeconds": "3600"}}
    quota = kueue_quota.queue_quota(ray_cluster_spec(spec(slices=1)), 1, SUBMISSION_MODE)
    queue = queue_manifests.cluster_queue(NAMES, "default", quota, admission_check=True)
    validate_kueue(queue)
    assert queue["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": check["metadata"]["name"], "onFlavors": [NAMES.tpu_flavor]}]}


def test_an_object_with_a_field_kueue_does_not_define_is_refused():
    import jsonschema

    queue = queue_manifests.local_queue(NAMES, "default")
    queue["spec"]["cohort"] = "research"  # v1beta1's name; v1beta2 has no such field on a LocalQueue
    with pytest.raises(jsonschema.ValidationError, match=r"\$\.spec\.cohort"):
        validate_kueue(queue)
    with pytest.raises(jsonschema.ValidationError, match="expected kueue.x-k8s.io/v1beta2"):
        validate_kueue({**queue_manifests.local_queue(NAMES, "default"), "apiVersion": "kueue.x-k8s.io/v1beta1"})


def test_kueues_configuration_waits_for_pods_requeues_with_backoff_and_counts_only_the_queues_resources():
    values = kueue_config.helm_values(kueue_waiting.WaitSettings(timeout_s=900, requeue_limit=2))
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and config["kind"] == "Configuration"
    assert config["waitForPodsReady"] == {"timeout": "900s", "blockAdmission": False, "requeuingStrategy": {
        "timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600, "backoffLimitCount": 2}}
    assert config["integrations"]["frameworks"] == ["batch/job", "ray.io/rayjob", "ray.io/raycluster"]
    assert config["resources"] == {"quotaCheckStrategy": "IgnoreUndeclared"}
    # The DCN claims of the TPU workers are neither counted nor a reason to refuse a run.
    assert values["controllerManager"]["featureGates"] == [{"name": "KueueDRAIntegration", "enabled": False},
                                                           {"name": "KueueDRARejectWorkloadsWhenDRADisabled", "enabled": False}]
    endless = kueue_config.manager_config(kueue_waiting.WaitSettings(requeue_limit=None))
    assert "backoffLimitCount" not in endless["waitForPodsReady"]["requeuingStrategy"]


def test_the_backoff_doubles_up_to_its_cap():
    wait = kueue_waiting.WaitSettings(backoff_base_s=60, backoff_max_s=300)
    assert [wait.backoff_s(n) for n in range(1, 6)] == [60, 120, 240, 300, 300]


# --- what a RayJob asks of the queue ---

def test_a_runs_pod_sets_are_the_head_and_replicas_times_hosts_workers():
    sets = kueue_quota.ray_job_pod_sets(job(ray_cluster_spec(spec(slices=3))))
    assert [(s.name, s.count) for s in sets] == [("head", 1), ("tpu-group", 12)]
    assert sets[0].requests == {"cpu": 8, "memory": 16 * 2**30}
    assert sets[1].requests == {"cpu": 8, "memory": 200 * 10**9, kueue.TPU: 4}
    assert kueue_quota.usage(sets)[kueue.TPU] == 48


def test_the_autoscaler_the_submitter_and_init_containers_count_as_kueue_counts_them():
    manifest = job(ray_cluster_spec(spec()), submissionMode="K8sJobMode")
    cluster = manifest["spec"]["rayClusterSpec"]
    cluster["enableInTreeAutoscaling"] = True  # what an elastic run that grows will bring (docs/queues.md)
    cluster["headGroupSpec"]["template"]["spec"]["initContainers"] = [
        {"name": "warm", "image": "busybox", "resources": {"requests": {"cpu": "12"}}}]
    head, workers, submitter = kueue_quota.ray_job_pod_sets(manifest)
    # The head's 8 cpu + the autoscaler's 0.5 is below the init container's 12; memory 16Gi + 512Mi.
    assert head.requests == {"cpu": 12, "memory": 16 * 2**30 + 512 * 2**20}
    assert (submitter.name, submitter.count, submitter.requests) == ("submitter", 1, {"cpu": Decimal("0.5"),
                                                                                       "memory": 200 * 2**20})
    sidecar_head = kueue_quota.ray_job_pod_sets(job(ray_cluster_spec(spec()), submissionMode="SidecarMode"))[0]
    assert sidecar_head.requests["cpu"] == Decimal("8.5")


def test_a_sidecar_init_container_and_the_pods_overhead_add_to_what_a_pod_asks():
    pod = {"containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}}],
           "initContainers": [
               {"restartPolicy": "Always", "resources": {"requests": {"cpu": "2"}}},  # a sidecar: runs beside them
               {"resources": {"requests": {"cpu": "4", "memory": "3Gi"}}},  # runs beside the sidecar only
           ],
           "overhead": {"cpu": "250m"}}
    # cpu: max(1 + 2, 4 + 2) + 0.25; memory: max(1Gi (its limit), 3Gi).
    assert kueue_quota.pod_requests(pod) == {"cpu": Decimal("6.25"), "memory": 3 * 2**30}


# --- Kueue's RayJob webhook ---

def test_the_stacks_runs_meet_kueues_rayjob_rules():
    manifest = job(ray_cluster_spec(spec()))
    validate_ray_job(manifest)
    assert ray_job_problems(manifest) == []


def _broken(change) -> list[str]:
    manifest = copy.deepcopy(job(ray_cluster_spec(spec())))
    change(manifest)
    return ray_job_problems(manifest)


@pytest.mark.parametrize("change, problem", [
    (lambda m: m["spec"].update(shutdownAfterJobFinishes=False), "must delete its cluster when it ends"),
    (lambda m: m["spec"].update(clusterSelector={"ray.io/cluster": "c"}), "must not use an existing cluster"),
    (lambda m: m["spec"].update(clusterSelector={"ray.io/cluster": "c"}, rayClusterSpec=None), "does not queue"),
    (lambda m: m["spec"].pop("rayClusterSpec"), "needs rayClusterSpec"),
    (lambda m: m["spec"]["rayClusterSpec"].update(enableInTreeAutoscaling=True), "only as a Kueue elastic job"),
    (lambda m: m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(groupName="head"), "reserves it for the head"),
    (lambda m: m["spec"]["rayClusterSpec"].update(
        workerGroupSpecs=[dict(m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0], groupName=f"g{i}") for i in range(18)]),
     "19 pod sets: Kueue takes at most 18"),
    (lambda m: m["metadata"]["labels"].update({kueue.QUEUE_LABEL: "Team_Queue"}), "not a DNS-1123 subdomain"),
])
def test_kueues_webhook_refuses(change, problem):
    problems = _broken(change)
    # KubeRay's own rules may say more (a ttl without shutdownAfterJobFinishes); Kueue's says this, once.
    assert [p for p in problems if problem in p] == [p for p in problems if "Kueue" in p or "pod sets" in p
                                                     or "DNS-1123" in p] and len([p for p in problems if problem in p]) == 1, problems


def test_an_elastic_run_may_autoscale_and_a_run_outside_the_queue_is_not_kueues():
    def elastic(manifest):
        manifest["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
        manifest["metadata"]["annotations"] = {kueue.ELASTIC_JOB_ANNOTATION: "true"}
    assert _broken(elastic) == []
    # Outside a queue Kueue says nothing: what is left is KubeRay's own rule (a ttl needs shutdownAfterJobFinishes).
    unqueued = _broken(lambda m: (m["metadata"].pop("labels"), m["spec"].update(shutdownAfterJobFinishes=False)))
    assert unqueued == ["ttlSecondsAfterFinished needs shutdownAfterJobFinishes"]


def test_autopilots_all_nics_claim_is_one_kueue_cannot_count():
    autopilot = resource_claim_template(spec(dcn=2, compute_class="tpu-class"))
    assert kueue_quota.claim_problems(autopilot) == [
        "device request 'req-netdev' asks for all devices (allocationMode All), which Kueue cannot count"]
    assert kueue_quota.claim_problems(resource_claim_template(spec(dcn=2))) == []


# --- a run no queue could admit ---

def stack_queue(**sharing) -> dict:
    quota = kueue_quota.queue_quota(ray_cluster_spec(spec()), 2, SUBMISSION_MODE)
    return queue_manifests.cluster_queue(NAMES, "default", quota,
                                         sharing=queue_manifests.Sharing("r", **sharing) if sharing else None)


FLAVORS = {NAMES.tpu_flavor: queue_manifests.tpu_flavor(NAMES, slice_shape("v6e", "4x4"), None, queued=False),
           NAMES.host_flavor: queue_manifests.host_flavor(NAMES)}


def problem(slices: int, queue: dict, strategy: str = kueue.IGNORE_UNDECLARED):
    sets = kueue_quota.ray_job_pod_sets(job(ray_cluster_spec(spec(slices=slices))), grown=True)
    return kueue_admission.admission_problem(sets, queue, FLAVORS, strategy)


def test_a_run_asking_more_than_the_queue_ever_has_is_named_in_kueues_words():
    assert problem(2, stack_queue()) is None
    # 3 slices: 48 chips, 12 workers of 8 cpu and 200G, where the queue holds 2 slices' worth. Kueue walks the
    # workers' resources memory first (their FNV-1a order), finds no flavor for the host group and stops there:
    # its words name cpu and memory, not the chips.
    said = problem(3, stack_queue())
    assert said == (
        f"couldn't assign flavors to pod set tpu-group: insufficient quota for cpu in flavor {NAMES.host_flavor}, "
        "previously considered podsets requests (8) + current podset request (96) > maximum capacity (80), "
        f"insufficient quota for memory in flavor {NAMES.host_flavor}, previously considered podsets requests (16Gi) "
        f"+ current podset request ({12 * 200 * 10**9 // 1024}Ki) > maximum capacity "
        f"({(2 * 16 * 2**30 + 8 * 200 * 10**9) // 1024}Ki)")
    # With cpu and memory for 4 slices and chips for 2, the chips are what it names.
    roomy = queue_manifests.cluster_queue(NAMES, "default", {
        **kueue_quota.queue_quota(ray_cluster_spec(spec(slices=4)), 4, SUBMISSION_MODE), kueue.TPU: Decimal(32)})
    assert problem(3, roomy) == (
        f"couldn't assign flavors to pod set tpu-group: insufficient quota for google.com/tpu in flavor "
        f"{NAMES.tpu_flavor}, previously considered podsets requests (0) + current podset request (48) > maximum "
        "capacity (32)")


def test_what_a_queue_may_borrow_counts_and_a_cohort_without_a_limit_is_unbounded():
    # 32 + 16 chips; cpu and memory, without a borrowing limit, as much as the cohort could lend.
    assert problem(3, stack_queue(borrowing_limit=16)) is None
    assert "current podset request (64) > maximum capacity (48)" in problem(4, stack_queue(borrowing_limit=16))
    assert problem(40, stack_queue()) is not None and problem(40, stack_queue(borrowing_limit=None)) is None


def test_a_queue_covering_the_chips_alone_never_admits_a_run_whatever_the_strategy():
    chips_only = stack_queue()
    chips_only["spec"]["resourceGroups"] = chips_only["spec"]["resourceGroups"][:1]
    # The head asks for cpu and memory only: skipped, they leave it no flavor, and Kueue's admission of one pod set
    # of two is refused by the Workload CRD.
    ignored = problem(2, chips_only, kueue.IGNORE_UNDECLARED)
    assert ignored.startswith(f"pod set head asks for cpu, memory, none of which ClusterQueue {NAMES.cluster_queue} "
                              "covers") and "name 1 of the Workload's 2 pod sets" in ignored
    # Checked, they are unavailable (Kueue walks the head's resources memory first: their FNV-1a order).
    assert problem(2, chips_only, kueue.BLOCK_UNDECLARED) == (
        "couldn't assign flavors to pod set head: resource memory unavailable in ClusterQueue")


# --- what waiting for slices that never come can cost ---

def test_waiting_bills_at_most_the_slices_that_came_for_the_timeout_and_scale_down_per_admission():
    wait = kueue_waiting.WaitSettings(timeout_s=1800, requeue_limit=3)
    cost = kueue_waiting.waiting_cost("spot", 2, wait)
    # 4 admissions x 1 slice x (1800 + 600) s = 9600 slice-seconds.
    assert (cost.attempts, cost.slices_billed, cost.seconds_per_attempt) == (4, 1, 2400)
    assert cost.slice_hours == pytest.approx(9600 / 3600)
    assert kueue_waiting.waiting_cost("on-demand", 4, wait).slice_hours == pytest.approx(4 * 3 * 2400 / 3600)
    assert kueue_waiting.waiting_cost("on-demand", 4, kueue_waiting.WaitSettings(requeue_limit=None)).slice_hours is None


@pytest.mark.parametrize("capacity, slices, queued, why", [
    ("reservation", 2, False, "billed whether or not"),
    ("flex-start", 1, True, "only once GKE has every slice"),
    ("spot", 1, False, "brings a slice up whole"),
])
def test_waiting_costs_nothing_where_no_slice_can_be_up_alone(capacity, slices, queued, why):
    cost = kueue_waiting.waiting_cost(capacity, slices, kueue_waiting.WaitSettings(), queued_provisioning=queued)
    assert cost.slice_hours == 0 and why in cost.why


def test_a_kuberay_deadline_inside_kueues_timeout_is_named():
    wait = kueue_waiting.WaitSettings(timeout_s=1800)
    assert kueue_waiting.deadline_problems(3600, 0, wait) == [] and kueue_waiting.deadline_problems(None, 2, wait) == []
    [fails] = kueue_waiting.deadline_problems(1800, 0, wait)
    assert "fails the run instead of sending it back to the queue" in fails
    [retries] = kueue_waiting.deadline_problems(600, 2, wait)
    assert "recreates its cluster up to 2 times within one admission" in retries


# --- a Workload read back in one line ---

def workload(*conditions, **status) -> dict:
    manifest = {
        "apiVersion": kueue.API_VERSION, "kind": "Workload",
        "metadata": {"name": "rayjob-r-abcde", "namespace": "default", "creationTimestamp": "2026-12-04T06:00:00Z"},
        "spec": {"queueName": "maxtext-tpu-cluster", "active": True, "podSets": [
            {"name": "head", "count": 1, "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}}}]},
        "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": m,
                                   "lastTransitionTime": "2026-12-04T06:10:00Z"} for t, s, r, m in conditions], **status},
    }
    validate_kueue(manifest)
    return manifest


def test_a_run_waiting_for_queued_provisioning_says_which_check_and_what_gke_said():
    reserved = workload(("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
                        ("Admitted", "False", "UnsatisfiedChecks", "The workload has not all checks ready"),
                        admission={"clusterQueue": "cq", "podSetAssignments": [{"name": "head", "count": 1}]},
                        admissionChecks=[{"name": "dws", "state": "Pending", "message": "Provisioning Request was created",
                                          "lastTransitionTime": "2026-12-04T06:10:00Z"}])
    assert queue_status.workload_line(reserved, now=NOW) == (
        "waiting for provisioning: quota reserved in cq, dws: Pending - Provisioning Request was created")


def test_a_queued_run_gives_its_position_and_the_newest_pending_reason_when_the_conditions_have_none():
    events = [{"reason": "Pending", "message": "older", "lastTimestamp": "2026-12-04T06:01:00Z"},
              {"reason": "Pending", "message": "insufficient unused quota for google.com/tpu in flavor f, 16 more needed",
               "lastTimestamp": "2026-12-04T06:02:00Z"}]
    assert queue_status.workload_line(workload(), events, now=NOW, position=2) == (
        "queued in maxtext-tpu-cluster at position 2: insufficient unused quota for google.com/tpu in flavor f, "
        "16 more needed")


def test_the_newest_unfinished_slice_stands_for_an_elastic_run():
    old = workload(("Finished", "True", "WorkloadSliceReplaced", "Replaced to accommodate a new workload slice"))
    new = copy.deepcopy(workload())
    new["metadata"]["creationTimestamp"] = "2026-12-04T06:20:00Z"
    assert queue_status.current_workload([new, old]) is new
    assert queue_status.current_workload([old]) is old and queue_status.current_workload([]) is None
