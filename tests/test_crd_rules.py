"""The CRDs' own CEL rules run (tests/crd_rules.py): every rule of the vendored KubeRay and Kueue CRDs compiles and
evaluates or is listed with the reason; each can refuse (an object built from the rule itself to break it, below,
one or more per rule, every rule covered); and every custom object the stack declares passes them, for each kind of
run it can declare. The submit command's RayJobs pass them at the fake API server (tests.fakes: a 422 otherwise), and
what the fakes write is held to them at each write (tests/schemas.py validate_writes)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Optional

import pytest

from tests import crd_rules
from tests.schemas import KUEUE_CRDS, RAYCLUSTER_CRD, RAYJOB_CRD, _crd_name, kueue_crd, validate_custom_object, \
    validate_writes

def manifest(name: str = "job", **spec) -> dict:
    """An HTTPMode RayJob that brings a cluster of one head and one 2-host slice (CRD-valid)."""
    container = {"name": "ray", "image": "rayproject/ray:2.60.0"}
    cluster = {
        "rayVersion": "2.60.0",
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [dict(container, name="ray-head")]}}},
        "workerGroupSpecs": [{"groupName": "tpu-group", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
                              "numOfHosts": 2, "rayStartParams": {},
                              "template": {"spec": {"containers": [dict(container, name="ray-worker")]}}}],
    }
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name, "namespace": "default"},
            "spec": {"entrypoint": "python -m train", "jobId": name, "submissionMode": "HTTPMode",
                     "runtimeEnvYAML": "", "shutdownAfterJobFinishes": True, "rayClusterSpec": cluster, **spec}}


REMOVE = object()
"""A case's value for a field it takes out."""
CRDS = {"RayCluster": (_crd_name(RAYCLUSTER_CRD), "v1"), "RayJob": (_crd_name(RAYJOB_CRD), "v1"),
        **{kind: (_crd_name(kueue_crd(kind)), "v1beta2") for kind in
           ("AdmissionCheck", "ClusterQueue", "Cohort", "LocalQueue", "ProvisioningRequestConfig", "ResourceFlavor",
            "Workload")}}
"""Each kind's vendored CRD and the version the stack writes."""
EVERY_CRD = sorted({*CRDS.values(), *((_crd_name(p), "v1beta2") for p in KUEUE_CRDS.glob("*.json"))})


def _kueue(kind: str, spec: dict, namespaced: bool = False) -> dict:
    metadata = {"name": kind.lower(), **({"namespace": "default"} if namespaced else {})}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": metadata, "spec": spec}


POD_TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
GROUPS = [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}]
BASES = {
    "RayJob": manifest(),
    "RayCluster": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c", "namespace": "default"},
                   "spec": manifest()["spec"]["rayClusterSpec"]},
    "AdmissionCheck": _kueue("AdmissionCheck", {"controllerName": "kueue.x-k8s.io/provisioning-request"}),
    "ClusterQueue": _kueue("ClusterQueue", {"resourceGroups": GROUPS}),
    "Cohort": _kueue("Cohort", {"resourceGroups": GROUPS}),
    "LocalQueue": _kueue("LocalQueue", {"clusterQueue": "cq"}, namespaced=True),
    "ResourceFlavor": _kueue("ResourceFlavor", {"nodeLabels": {"pool": "tpu"}}),
    "Workload": {**_kueue("Workload", {"queueName": "lq", "podSets": [
        {"name": "head", "count": 1, "template": POD_TEMPLATE},
        {"name": "workers", "count": 2, "template": POD_TEMPLATE}]}, namespaced=True), "status": {}},
}
"""A valid object of each kind, which every case changes."""


def condition(kind: str, status: str = "True") -> dict:
    return {"type": kind, "status": status, "reason": kind, "message": "", "lastTransitionTime": "2026-12-04T06:00:00Z"}


RESERVED = {"status.conditions": [condition("QuotaReserved")]}
ADMITTED = {"status.conditions": [condition("QuotaReserved"), condition("Admitted")]}
KUEUE_PRIORITY = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "p"}
SCHEDULING_PRIORITY = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "p"}
ONE_FLAVOR = [{"name": "head", "count": 1, "flavors": {"cpu": "f"}}]
CHECK = {"name": "prov", "state": "Pending", "message": "", "lastTransitionTime": "2026-12-04T06:00:00Z"}


def toleration_cases(kind: str, at: str, put) -> list:
    """The toleration rules (Kueue's, on a ResourceFlavor and on a Workload's admission checks), each broken."""
    return [
        Case(kind, at, "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
             put([{"operator": "Equal", "value": "v"}])),
        Case(kind, at, "effect must be 'NoExecute' when 'tolerationSeconds' is set",
             put([{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}])),
        Case(kind, at, "supported toleration values: 'Equal'(default), 'Exists'", put([{"key": "k", "operator": "In"}])),
        Case(kind, at, "a value must be empty when 'operator' is 'Exists'",
             put([{"key": "k", "operator": "Exists", "value": "v"}])),
        Case(kind, at, "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
             put([{"key": "k", "operator": "Exists", "effect": "Sometimes"}])),
    ]


@dataclass(frozen=True)
class Case:
    """An object of ``kind`` that breaks the rule at ``at`` whose message is ``message``: the base with ``new``'s
    fields set (dotted paths), as an update of the base with ``old``'s where given. ``also``: other rules the change
    cannot help breaking."""

    kind: str
    at: str
    message: str
    new: dict
    old: Optional[dict] = None
    also: tuple = ()


def _slices(**slice_fields) -> dict:
    slice_ = {"domainCount": 1, "podCounts": {"universal": 1}, "valuesPerLevel": [{"universal": "a"}], **slice_fields}
    return {"status.admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "head", "count": 1, "topologyAssignment": {"levels": ["rack"], "slices": [slice_]}}]}}


CASES = [
    # KubeRay v1.7.0: RayCluster
    Case("RayCluster", "spec.gcsFaultToleranceOptions.backend", "gcsFaultToleranceOptions.backend is immutable",
         {"spec.gcsFaultToleranceOptions": {"backend": "rocksdb"}}, {"spec.gcsFaultToleranceOptions": {"backend": "redis"}}),
    Case("RayCluster", "spec.managedBy", "the managedBy field is immutable",
         {"spec.managedBy": "kueue.x-k8s.io/multikueue"}, {"spec.managedBy": "ray.io/kuberay-operator"}),
    Case("RayCluster", "spec.managedBy", "the managedBy field value must be either 'ray.io/kuberay-operator' or "
                                         "'kueue.x-k8s.io/multikueue'", {"spec.managedBy": "someone-else"}),
    # KubeRay v1.7.0: RayJob
    Case("RayJob", "spec.deletionStrategy", "legacy policies (onSuccess/onFailure) and deletionRules cannot be used "
                                            "together within the same deletionStrategy",
         {"spec.deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteCluster"},
                                    "deletionRules": [{"policy": "DeleteCluster",
                                                       "condition": {"jobStatus": "SUCCEEDED"}}]}}),
    Case("RayJob", "spec.deletionStrategy", "deletionStrategy requires either BOTH onSuccess and onFailure, OR the "
                                            "deletionRules field (cannot be empty)",
         {"spec.deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}}}),
    Case("RayJob", "spec.deletionStrategy.deletionRules[].condition",
         "JobStatus and JobDeploymentStatus cannot be used together within the same deletion condition.",
         {"spec.deletionStrategy": {"deletionRules": [
             {"policy": "DeleteCluster", "condition": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"}}]}}),
    Case("RayJob", "spec.deletionStrategy.deletionRules[].condition",
         "the deletion condition requires either the JobStatus or the JobDeploymentStatus field.",
         {"spec.deletionStrategy": {"deletionRules": [{"policy": "DeleteCluster", "condition": {"ttlSeconds": 60}}]}}),
    Case("RayJob", "spec.managedBy", "the managedBy field is immutable",
         {"spec.managedBy": "kueue.x-k8s.io/multikueue"}, {"spec.managedBy": "ray.io/kuberay-operator"}),
    Case("RayJob", "spec.managedBy", "the managedBy field value must be either 'ray.io/kuberay-operator' or "
                                     "'kueue.x-k8s.io/multikueue'", {"spec.managedBy": "someone-else"}),
    Case("RayJob", "spec.rayClusterSpec.gcsFaultToleranceOptions.backend", "gcsFaultToleranceOptions.backend is immutable",
         {"spec.rayClusterSpec.gcsFaultToleranceOptions": {"backend": "rocksdb"}},
         {"spec.rayClusterSpec.gcsFaultToleranceOptions": {"backend": "redis"}}),
    Case("RayJob", "spec.rayClusterSpec.managedBy", "the managedBy field is immutable",
         {"spec.rayClusterSpec.managedBy": "kueue.x-k8s.io/multikueue"},
         {"spec.rayClusterSpec.managedBy": "ray.io/kuberay-operator"}),
    Case("RayJob", "spec.rayClusterSpec.managedBy", "the managedBy field value must be either "
                                                    "'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'",
         {"spec.rayClusterSpec.managedBy": "someone-else"}),
    # Kueue v0.19.2
    Case("AdmissionCheck", "spec.controllerName", "field is immutable", {"spec.controllerName": "other"},
         {"spec.controllerName": "kueue.x-k8s.io/provisioning-request"}),
    Case("ClusterQueue", "spec", "borrowingLimit must be nil when cohort is empty",
         {"spec.resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
             {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}]}]}]}),
    Case("ClusterQueue", "spec.flavorFungibility", "preference can only be set when both whenCanBorrow and "
                                                   "whenCanPreempt are TryNextFlavor",
         {"spec.flavorFungibility": {"preference": "BorrowingOverPreemption"}}),  # whenCanBorrow defaults to MayStopSearch
    Case("ClusterQueue", "spec.preemption", "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
         {"spec.preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}}),  # reclaimWithinCohort defaults to Never
    Case("ClusterQueue", "spec.resourceGroups[]", "flavors must have the same number of resources as the "
                                                  "coveredResources",
         {"spec.resourceGroups": [{**GROUPS[0], "coveredResources": ["cpu", "memory"]}]}),
    Case("Cohort", "spec.resourceGroups[]", "flavors must have the same number of resources as the coveredResources",
         {"spec.resourceGroups": [{**GROUPS[0], "coveredResources": ["cpu", "memory"]}]}),
    Case("LocalQueue", "spec.clusterQueue", "field is immutable", {"spec.clusterQueue": "other"},
         {"spec.clusterQueue": "cq"}),
    Case("ResourceFlavor", "spec", "at least one nodeLabel is required when topology is set",
         {"spec.topologyName": "t", "spec.nodeLabels": {}}),
    Case("ResourceFlavor", "spec", "nodeLabels are immutable when topologyName is set",
         {"spec.topologyName": "t", "spec.nodeLabels": {"pool": "gpu"}}, {"spec.topologyName": "t"}),
    Case("ResourceFlavor", "spec", "tolerations are immutable when topologyName is set",
         {"spec.topologyName": "t", "spec.tolerations": [{"key": "k", "operator": "Exists"}]},
         {"spec.topologyName": "t"}),
    Case("ResourceFlavor", "spec", "topologyName is immutable when topologyName is set", {"spec.topologyName": "u"},
         {"spec.topologyName": "t"}),
    Case("ResourceFlavor", "spec.nodeTaints", "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', "
                                              "'NoExecute'", {"spec.nodeTaints": [{"key": "k", "effect": "Sometimes"}]}),
    *toleration_cases("ResourceFlavor", "spec.tolerations", lambda t: {"spec.tolerations": t}),
    Case("Workload", "", "podSetAssignments must have the same number of podSets as the spec",
         {**RESERVED, "status.admission": {"clusterQueue": "cq", "podSetAssignments": ONE_FLAVOR}}),
    Case("Workload", "", "priorityClassRef is immutable while workload quota reserved",
         {**RESERVED, "spec.priorityClassRef": KUEUE_PRIORITY, "spec.priority": 1}, RESERVED),
    Case("Workload", "", "priorityClassRef.group is immutable while workload quota reserved",
         {**RESERVED, "spec.priorityClassRef": KUEUE_PRIORITY, "spec.priority": 1},
         {**RESERVED, "spec.priorityClassRef": SCHEDULING_PRIORITY, "spec.priority": 1},
         also=("priorityClassRef.kind is immutable while workload quota reserved",)),
    Case("Workload", "", "priorityClassRef.name is immutable for scheduling.k8s.io/priorityclass while workload quota "
                         "reserved", {**RESERVED, "spec.priorityClassRef": {**SCHEDULING_PRIORITY, "name": "q"},
                                      "spec.priority": 1},
         {**RESERVED, "spec.priorityClassRef": SCHEDULING_PRIORITY, "spec.priority": 1}),
    Case("Workload", "", "queueName is immutable while workload quota reserved", {**RESERVED, "spec.queueName": "other"},
         RESERVED),
    Case("Workload", "", "maximumExecutionTimeSeconds is immutable while workload quota reserved",
         {**ADMITTED, "spec.maximumExecutionTimeSeconds": 7200}, {**ADMITTED, "spec.maximumExecutionTimeSeconds": 3600}),
    Case("Workload", "spec", "priority should not be nil when priorityClassRef is set",
         {"spec.priorityClassRef": KUEUE_PRIORITY}),
    Case("Workload", "spec.podSets[]", "minCount should be positive and less or equal to count",
         {"spec.podSets": [{"name": "head", "count": 1, "template": POD_TEMPLATE},
                           {"name": "workers", "count": 2, "minCount": 3, "template": POD_TEMPLATE}]}),
    Case("Workload", "spec.priorityClassRef", "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
         {"spec.priorityClassRef": {**SCHEDULING_PRIORITY, "kind": "WorkloadPriorityClass"}, "spec.priority": 1}),
    Case("Workload", "spec.priorityClassRef", "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io "
                                              "group", {"spec.priorityClassRef": {**KUEUE_PRIORITY, "kind": "PriorityClass"},
                                                        "spec.priority": 1}),
    Case("Workload", "status", "clusterName is immutable once set", {"status.clusterName": "b"},
         {"status.clusterName": "a"}),
    Case("Workload", "status", "clusterName and nominatedClusterNames are mutually exclusive",
         {"status.clusterName": "a", "status.nominatedClusterNames": ["b"]}),
    Case("Workload", "status.admission.podSetAssignments[].topologyAssignment",
         "valuesPerLevel must have the same length as the number of levels in this TopologyAssignment",
         _slices(valuesPerLevel=[{"universal": "a"}, {"universal": "b"}])),
    Case("Workload", "status.admission.podSetAssignments[].topologyAssignment.slices[]",
         "podCounts.individual must have length equal to domainCount",
         _slices(domainCount=2, podCounts={"individual": [1]}, valuesPerLevel=[{"universal": "a"}])),
    Case("Workload", "status.admission.podSetAssignments[].topologyAssignment.slices[]",
         "valuesPerLevel.individual, if set, must have roots of length equal to domainCount of this "
         "TopologyAssignmentSlice", _slices(domainCount=2, valuesPerLevel=[{"individual": {"roots": ["a"]}}])),
    Case("Workload", "status.admission.podSetAssignments[].topologyAssignment.slices[].podCounts",
         "exactly one of the fields in [universal individual] must be set",
         _slices(podCounts={"universal": 1, "individual": [1]})),
    Case("Workload", "status.admission.podSetAssignments[].topologyAssignment.slices[].valuesPerLevel[]",
         "exactly one of the fields in [universal individual] must be set",
         _slices(valuesPerLevel=[{"universal": "a", "individual": {"roots": ["a"]}}])),
    *toleration_cases("Workload", "status.admissionChecks[].podSetUpdates[].tolerations",
                      lambda t: {"status.admissionChecks": [{**CHECK, "podSetUpdates": [{"name": "head",
                                                                                          "tolerations": t}]}]}),
]


def build(kind: str, fields: Optional[dict]) -> Optional[dict]:
    if fields is None:
        return None
    obj = copy.deepcopy(BASES[kind])
    for path, value in fields.items():
        *parents, last = path.split(".")
        node = obj
        for step in parents:
            node = node.setdefault(step, {})
        if value is REMOVE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return obj


def refusals(case: Case) -> set[tuple[str, str]]:
    crd, version = CRDS[case.kind]
    found = crd_rules.violations(build(case.kind, case.new), crd, version, build(case.kind, case.old))
    return {(v.rule.where, v.rule.message) for v in found}


@pytest.mark.parametrize("kind", sorted(BASES))
def test_each_kinds_base_object_passes_its_crd_and_its_rules(kind):
    validate_custom_object(BASES[kind])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kind}:{c.at}:{c.message[:40]}")
def test_a_rule_refuses_an_object_built_to_break_it_and_only_that_rule(case):
    assert refusals(case) == {(case.at, case.message), *((case.at, m) for m in case.also)}
    if case.old is not None:  # a transition rule: the same object as a create, or unchanged, passes
        assert not (refusals(Case(case.kind, case.at, case.message, case.old))
                    | refusals(Case(case.kind, case.at, case.message, case.old, case.old)))


@pytest.mark.parametrize("fields", [
    {"spec.preemption": {"borrowWithinCohort": {}}},
    {"spec.flavorFungibility": {"preference": "BorrowingOverPreemption", "whenCanBorrow": "TryNextFlavor"}}])
def test_a_rule_reads_the_crds_defaults_as_the_api_server_fills_them_in(fields):
    """A ClusterQueue that leaves ``borrowWithinCohort.policy`` or ``whenCanPreempt`` to its default passes: the
    rules that read them see the defaults (without them, reading the field is an error, and the object refused)."""
    assert refusals(Case("ClusterQueue", "spec", "", fields)) == set()


def test_a_rule_that_cannot_read_what_it_needs_refuses_as_the_api_server_does():
    """An evaluation error refuses the object: a ResourceFlavor with a topology and no nodeLabels at all (the rule
    reads ``self.nodeLabels`` unguarded; the API server answers "no such key")."""
    crd, version = CRDS["ResourceFlavor"]
    [refused] = crd_rules.violations(build("ResourceFlavor", {"spec.topologyName": "t", "spec.nodeLabels": REMOVE}),
                                     crd, version)
    assert refused.rule.message == "at least one nodeLabel is required when topology is set"
    assert refused.error.startswith("KeyError") and "evaluation error" in str(refused)


def test_every_rule_of_every_vendored_crd_has_a_case_that_breaks_it():
    covered = {(CRDS[c.kind][0], c.at, m) for c in CASES for m in (c.message, *c.also)}
    rules = {(rule.crd, rule.where, rule.message) for crd, version in EVERY_CRD
             for rule in crd_rules.rules_of(crd, version)}
    assert rules - covered == set()
    assert covered - rules == set()


def test_the_not_evaluable_list_is_exactly_the_rules_the_library_fails_on(monkeypatch):
    """Every rule is compiled, and evaluated on each case's objects (create and update) and each base: those the
    library fails on are the list, no more, no fewer."""
    failing = {rule.key for crd, version in EVERY_CRD for rule in crd_rules.rules_of(crd, version) if rule.why_not}
    objects = [(c.kind, build(c.kind, c.new), build(c.kind, c.old)) for c in CASES]
    objects += [(kind, obj, None) for kind, obj in BASES.items()] + [(kind, obj, obj) for kind, obj in BASES.items()]
    for kind, new, old in objects:
        while True:
            monkeypatch.setattr(crd_rules, "NOT_EVALUABLE", {key: "found here" for key in failing})
            try:
                crd_rules.violations(new, *CRDS[kind], old)
                break
            except crd_rules.LibraryGap as gap:
                failing.add(gap.rule.key)
    monkeypatch.undo()
    assert failing == set(crd_rules.NOT_EVALUABLE)


def test_a_rule_the_library_cannot_evaluate_is_a_gap_never_a_pass():
    """Kubernetes' own CEL libraries (quantity, lists, format) are not in the library: a rule calling one, or using
    messageExpression, which the evaluator does not handle, raises LibraryGap rather than passing."""
    quantity = crd_rules.compile_rule("t.json", ("spec",), {"rule": "quantity(self.q).isGreaterThan(quantity('1'))",
                                                            "message": "m"})
    with pytest.raises(crd_rules.LibraryGap, match="Undefined variable or function"):
        crd_rules.evaluate(quantity, {"q": "2"})
    expression = crd_rules.compile_rule("t.json", ("spec",), {"rule": "self.a", "messageExpression": "'x'"})
    assert expression.why_not == "the evaluator does not handle messageExpression"
    with pytest.raises(crd_rules.LibraryGap, match="messageExpression"):
        crd_rules.evaluate(expression, {"a": True})
    listed = crd_rules.compile_rule("t.json", ("spec", crd_rules.ITEMS), {"rule": "self == oldSelf"})
    assert listed.why_not == "a transition rule under a list item: list items are not correlated here"


def test_a_fake_that_writes_what_a_rule_refuses_fails_at_the_write():
    """validate_writes: each write is an update of the last; here a Workload's queue changed while it holds quota."""
    store = type("FakeKueueStandIn", (), {})()
    workload = build("Workload", RESERVED)
    validate_writes(store, [workload])
    workload["spec"]["queueName"] = "other"
    with pytest.raises(AssertionError, match="queueName is immutable while workload quota reserved"):
        validate_writes(store, [workload])


# --- what the stack declares -------------------------------------------------------------------------------------

STACKS = {
    "held cluster (dev)": {},
    "own clusters, spot, in the stack's queue": {"capacity": "spot", "scaleToZero": "true"},
    "flex-start, in the stack's queue": {"capacity": "flex-start"},
    "flex-start, one slice, queued provisioning": {"capacity": "flex-start", "numSlices": "1",
                                                   "queuedProvisioning": "true", "maxRunDuration": "86400"},
    "flex-start, the cluster's own Kueue": {"capacity": "flex-start", "installKueue": "false"},
    "spot, an elastic declared run": {"capacity": "spot", "scaleToZero": "true", "runs": json.dumps(
        [{"name": "elastic-8b", "preset": "llama3-8b-elastic", "elastic": True, "minSlices": 1}])},
    "flex-start, a declared run with deadlines": {"capacity": "flex-start", "runs": json.dumps(
        [{"name": "r", "backoffLimit": 2, "activeDeadlineSeconds": 7200}])},
}


@pytest.mark.parametrize("keys", STACKS.values(), ids=STACKS)
def test_every_custom_object_the_stack_declares_passes_its_crd_and_its_rules(run_stack, keys):
    run = run_stack(**keys)
    custom = [r.inputs for r in run.resources
              if r.type.startswith(("kubernetes:ray.io/", "kubernetes:kueue.x-k8s.io/"))]
    assert custom, "no custom object declared"
    for obj in custom:
        validate_custom_object(obj)
    kinds = {obj["kind"] for obj in custom}
    assert "RayJob" in kinds or "RayCluster" in kinds
