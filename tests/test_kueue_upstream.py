"""Kueue's own test cases (kubernetes-sigs/kueue v0.19.2), translated as data under tests/upstream/, run against the
fake Kueue: its flavor assignment (TestAssignFlavors and its neighbours in flavorassigner_test.go), its scheduling
(TestSchedule, the quota-check-strategy integration test), how it makes a RayJob's pod sets (TestBuildPodSets,
TestPodSets) and its RayJob webhook (TestValidateCreate). A case the fake answers differently from Kueue fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gke_ray_tpu.core import kueue_admission, kueue_quota
from gke_ray_tpu.core.kueue_quota import PodSet
from gke_ray_tpu.core.quantities import kueue_value, quantity
from tests.fake_kueue import FakeKueue, FakeScheduler
from tests.fakes import FakeJobsClient, FakeKubeRay

UPSTREAM = Path(__file__).parent / "upstream"
FLAVOR_CASES = yaml.safe_load((UPSTREAM / "kueue_flavorassigner_cases.yaml").read_text())
COMPARED = {"TestAssignFlavors": "all", "TestDeletedFlavors": "all", "TestReclaimBeforePriorityPreemption": "names"}
"""What each upstream test compares: the whole assignment (mode, flavors and their modes, status, borrowing,
usage), or the mode and each resource's flavor name."""


def case_id(case: dict) -> str:
    return f"{case['test']}/{case['name']}"


def cluster_queue(name: str, compact: dict) -> dict:
    """A ClusterQueue manifest from a case's compact form (groups of flavor -> quotas, in coveredResources order)."""
    groups = []
    for group in compact["groups"]:
        flavors = []
        for flavor, quotas in group.items():
            resources = []
            for resource, amount in quotas.items():
                entry = dict(amount) if isinstance(amount, dict) else {"nominal": amount}
                resources.append({"name": resource, "nominalQuota": entry.pop("nominal"), **entry})
            flavors.append({"name": flavor, "resources": resources})
        groups.append({"coveredResources": [r["name"] for r in flavors[0]["resources"]], "flavors": flavors})
    spec: dict = {"resourceGroups": groups}
    if "cohort" in compact:
        spec["cohortName"] = compact["cohort"]
    if "fungibility" in compact:
        spec["flavorFungibility"] = compact["fungibility"]
    if "preemption" in compact:
        spec["preemption"] = compact["preemption"]
    return {"metadata": {"name": name}, "spec": spec}


def flavor_resource(key: str) -> tuple[str, str]:
    flavor, resource = key.split("/", 1)
    return flavor, resource


def usage(compact: dict | None) -> dict[tuple[str, str], int]:
    """"flavor/resource": quantity, in Kueue's units."""
    return {flavor_resource(k): kueue_value(flavor_resource(k)[1], v) for k, v in (compact or {}).items()}


def pod_set(compact: dict) -> PodSet:
    """A pod set of ``count`` pods, each with one container asking ``requests`` (``MakePodSet(...).Request``)."""
    pod: dict = {"containers": [{"resources": {"requests": dict(compact.get("requests") or {})}}]}
    for key in ("nodeSelector", "tolerations"):
        if key in compact:
            pod[key] = compact[key]
    if "affinity" in compact:
        terms = [{"matchExpressions": term} for term in compact["affinity"]]
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    requests = {r: quantity(v) for r, v in (compact.get("requests") or {}).items()}
    return PodSet(compact["name"], int(compact["count"]), requests, {"spec": pod})


def flavors(case: dict) -> list[dict]:
    found = case.get("flavors", FLAVOR_CASES["flavors"])
    return [{"metadata": {"name": name}, "spec": spec} for name, spec in found.items()]


def oracle(case: dict):
    """The test's testOracle: its simulationResult per flavor and resource, else Preempt at borrowing level 0."""
    answers = {flavor_resource(k): tuple(v) for k, v in (case.get("oracle") or {}).items()}
    return lambda flavor, resource, amount: answers.get((flavor, resource), ("Preempt", 0))


def assign(case: dict) -> kueue_admission.Assignment:
    neighbours = tuple((cluster_queue(f"neighbour-{i}", n), usage(n.get("usage")))
                       for i, n in enumerate(case.get("neighbours") or []))
    scheduler = FakeScheduler(cluster_queue("test-clusterqueue", case["cluster_queue"]), flavors(case),
                              case.get("strategy", "BlockUndeclared"), oracle=oracle(case),
                              neighbours=neighbours, fair_sharing=case.get("fair_sharing", False))
    sets = [pod_set(p) for p in case["pod_sets"]]
    return scheduler.assign(sets, usage(case.get("usage")), [p.get("group") for p in case["pod_sets"]])


def seen(assignment: kueue_admission.Assignment, compared: str) -> dict:
    """The assignment in the cases' terms."""
    pod_sets = []
    for one in assignment.pod_sets:
        flavors_of = {r: c.flavor if compared == "names" else f"{c.flavor} {kueue_admission.MODE_NAMES[c.mode]}"
                      for r, c in one.flavors.items()}
        entry: dict = {"name": one.name, "flavors": flavors_of}
        if compared == "all":
            entry["reasons"] = sorted(one.status.reasons)
        pod_sets.append(entry)
    said: dict = {"mode": kueue_admission.MODE_NAMES[assignment.mode], "pod_sets": pod_sets}
    if compared == "all":
        said["borrowing"] = assignment.borrowing
        said["usage"] = dict(sorted(assignment.usage.items()))
    return said


def wanted(expect: dict, compared: str) -> dict:
    pod_sets = []
    for one in expect["pod_sets"]:
        entry: dict = {"name": one["name"], "flavors": dict(one.get("flavors") or {})}
        if compared == "all":
            entry["reasons"] = sorted(one.get("reasons") or [])
        pod_sets.append(entry)
    said: dict = {"mode": expect.get("mode", "NoFit"), "pod_sets": pod_sets}
    if compared == "all":
        said["borrowing"] = expect.get("borrowing", 0)
        said["usage"] = dict(sorted(usage(expect.get("usage")).items()))
    return said


@pytest.mark.parametrize("case", FLAVOR_CASES["cases"], ids=case_id)
def test_the_fake_assigns_flavors_as_kueues_own_cases_say(case):
    compared = COMPARED[case["test"]]
    assert seen(assign(case), compared) == wanted(case["expect"], compared)


@pytest.mark.parametrize("case", FLAVOR_CASES["is_preferred"], ids=lambda c: c["name"])
def test_which_flavor_mode_is_preferred_as_kueues_own_cases_say(case):
    mode = kueue_admission.PREEMPTION_MODES
    a, b = (mode[case["a"][0]], case["a"][1]), (mode[case["b"][0]], case["b"][1])
    assert kueue_admission.is_preferred(a, b, case.get("preference")) is case["want"]


def test_every_translated_case_names_an_upstream_test_once():
    names = [case_id(c) for c in FLAVOR_CASES["cases"]]
    assert len(names) == len(set(names)) and set(c["test"] for c in FLAVOR_CASES["cases"]) == set(COMPARED)


# --- Scheduling: TestSchedule and the quota check strategy integration test ------------------------------------

SCHEDULE_CASES = yaml.safe_load((UPSTREAM / "kueue_schedule_cases.yaml").read_text())


def scheduled_queue(name: str) -> dict:
    """One of the cases' ClusterQueues as ``MakeClusterQueue`` makes it (every namespace, BestEffortFIFO)."""
    compact = SCHEDULE_CASES["cluster_queues"][name]
    manifest = cluster_queue(name, compact)
    manifest["spec"]["namespaceSelector"] = compact.get("namespaceSelector", {})
    manifest["spec"]["queueingStrategy"] = compact.get("queueingStrategy", "BestEffortFIFO")
    return manifest


def workload(compact: dict) -> dict:
    pod_sets = []
    for one in compact["pod_sets"]:
        resources = {k: dict(one[k]) for k in ("requests", "limits") if k in one}
        pod_sets.append({"name": one["name"], "count": one["count"],
                         "template": {"spec": {"containers": [{"name": "c", "resources": resources}]}}})
    manifest = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": compact["name"], "namespace": compact["namespace"]},
                "spec": {"podSets": pod_sets, **({"queueName": compact["queue"]} if "queue" in compact else {})}}
    admission = compact.get("admission")
    if admission:
        manifest["status"] = {
            "admission": {"clusterQueue": admission["cluster_queue"], "podSetAssignments": admission["pod_sets"]},
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "AdmittedByTest",
                            "message": f"Admitted by ClusterQueue {admission['cluster_queue']}",
                            "lastTransitionTime": "2026-12-04T05:00:00Z"}]}
    return manifest


def scheduled(case: dict) -> FakeKueue:
    """The fake Kueue over the ClusterQueue of the case's queued Workloads, its Workloads added, one pass run."""
    (local,) = {f"{w['namespace']}/{w['queue']}" for w in case["workloads"] if "queue" in w}
    queue_name = SCHEDULE_CASES["local_queues"][local]
    namespace, name = local.split("/")
    local_queue = {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": queue_name}}
    neighbours = tuple((scheduled_queue(n), {}) for n in case.get("neighbours") or [])
    fake = FakeKueue(FakeKubeRay(FakeJobsClient()), scheduled_queue(queue_name), local_queue,
                     [{"metadata": {"name": n}, "spec": s} for n, s in SCHEDULE_CASES["flavors"].items()],
                     strategy=case.get("strategy", "BlockUndeclared"), neighbours=neighbours,
                     namespace_labels=SCHEDULE_CASES["namespaces"])
    for one in case["workloads"]:
        fake.add_workload(workload(one))
    fake.tick()
    return fake


def assignments_of(admission: dict) -> list[dict]:
    """podSetAssignments with their quantities as numbers, so ``40000m`` and ``40`` read the same."""
    return [{"name": a["name"], "count": a["count"], "flavors": a["flavors"],
             "resourceUsage": {r: kueue_value(r, v) for r, v in a["resourceUsage"].items()}} for a in admission]


@pytest.mark.parametrize("case", SCHEDULE_CASES["cases"], ids=case_id)
def test_the_fake_schedules_as_kueues_own_cases_say(case):
    fake = scheduled(case)
    expect = case["expect"]
    admitted = {f"{w['metadata']['namespace']}/{w['metadata']['name']}": assignments_of(
                    w["status"]["admission"]["podSetAssignments"])
                for w in fake.workloads.values() if conditions(w).get("QuotaReserved", {}).get("status") == "True"}
    assert admitted == {k: assignments_of(v) for k, v in (expect.get("admitted") or {}).items()}
    for key, message in (expect.get("pending") or {}).items():
        reserved = conditions(fake.workloads[key.split("/")[1]])["QuotaReserved"]
        assert reserved["status"] == "False"
        assert message is None or reserved["message"] == message
    if "usage" in expect:
        assert fake.used() == usage(expect["usage"])
    assert fake.refused == []


def conditions(one: dict) -> dict:
    return {c["type"]: c for c in (one.get("status") or {}).get("conditions") or []}


# --- A RayJob's pod sets, and Kueue's RayJob webhook ---------------------------------------------------------

RAYJOB_CASES = yaml.safe_load((UPSTREAM / "kueue_rayjob_cases.yaml").read_text())


def built(case: dict) -> list[dict]:
    """The pod sets the fake Kueue makes of the case's RayCluster spec (as a RayJob bringing it, in HTTPMode,
    which adds no submitter) or RayJob spec, as the cases spell them."""
    if "cluster" in case:
        job = {"metadata": {"annotations": case.get("annotations") or {}},
               "spec": {"submissionMode": "HTTPMode", "rayClusterSpec": case["cluster"]}}
    else:
        job = {"metadata": {}, "spec": case["job"]}
    sets = []
    for one in kueue_quota.kueue_pod_sets(job):
        template = one["template"]
        entry: dict = {"name": one["name"], "count": one["count"],
                       "containers": [{k: c[k] for k in ("name", "resources") if c.get(k)}
                                      for c in (template.get("spec") or {}).get("containers") or []]}
        if (template.get("metadata") or {}).get("labels"):
            entry["labels"] = template["metadata"]["labels"]
        sets.append(entry)
    return sets


@pytest.mark.parametrize("case", RAYJOB_CASES["pod_sets"], ids=case_id)
def test_the_fake_makes_a_rayjobs_pod_sets_as_kueues_own_cases_say(case):
    if case.get("error"):
        with pytest.raises(ValueError, match="head pod template must include the Ray container"):
            built(case)
        return
    assert built(case) == case["want"]


def make_job(case: dict) -> dict:
    """``testingrayutil.MakeJob("job", "ns").Queue("queue")`` with the case's changes."""
    job: dict = {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "job", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "queue"}},
        "spec": {"shutdownAfterJobFinishes": True, "suspend": True, "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "head-container", "resources": {"requests": {}, "limits": {}}}]}}},
            "workerGroupSpecs": [{"groupName": "workers-group-0", "replicas": 1, "minReplicas": 1, "maxReplicas": 5,
                                  "rayStartParams": {}, "template": {"spec": {"restartPolicy": "Never", "containers": [
                                      {"name": "worker-container", "resources": {"requests": {}, "limits": {}}}]}}}]}}}
    if "worker_groups" in case:
        job["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [{"groupName": f"workers-{i}"}
                                                             for i in range(case["worker_groups"])]
    merge(job, case.get("changes") or {})
    return job


def merge(into: dict, changes: dict) -> None:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        elif value is None:
            into.pop(key, None)
        else:
            into[key] = value


@pytest.mark.parametrize("case", RAYJOB_CASES["webhook"], ids=case_id)
def test_the_fakes_webhook_refuses_what_kueues_own_cases_refuse(case):
    fake = FakeKueue(FakeKubeRay(FakeJobsClient()), scheduled_queue("sales"),
                     {"metadata": {"name": "queue", "namespace": "ns"}, "spec": {"clusterQueue": "sales"}}, [])
    try:
        fake.admit_to_queue(make_job(case))
        refused = False
    except Exception as e:  # the fake's 403, as Kueue's webhook answers
        assert getattr(e, "status", None) == 403, e
        refused = True
    assert refused is case["refused"]
