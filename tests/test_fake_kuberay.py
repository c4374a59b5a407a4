"""The fake KubeRay (tests.fakes.FakeKubeRay) held to KubeRay's own tests at v1.7.0, the release whose CRDs are
vendored (tests/crds/README.md): each case below is one of KubeRay's test cases, named, translated into data and run
against the fake. ``rayjob_controller_unit_test.go`` and ``rayjob_controller_suspended_test.go`` drive single
reconciles; ``rayjob_controller_test.go`` (envtest) and ``test/e2erayjob/*`` drive a RayJob through its life, and
their assertions on its status, its cluster and the order of its states are what a case expects. KubeRay's
K8sJobMode cases are taken for their RayJob states, which are the same in HTTPMode, the only mode the fake models."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Optional

import pytest

from tests.fakes import FakeJobsClient, FakeKubeRay
from tests.test_crd_rules import manifest

UNIT = "ray-operator/controllers/ray/rayjob_controller_unit_test.go"
SUSPENDED = "ray-operator/controllers/ray/rayjob_controller_suspended_test.go"
ENVTEST = "ray-operator/controllers/ray/rayjob_controller_test.go"
E2E = "ray-operator/test/e2erayjob/rayjob_test.go"
E2E_RETRY = "ray-operator/test/e2erayjob/rayjob_retry_test.go"
E2E_SUSPEND = "ray-operator/test/e2erayjob/rayjob_suspend_test.go"


# --- single reconciles ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """One of KubeRay's unit cases: a RayJob's status and spec before, one step of the controller, what it left."""

    upstream: str
    spec: dict
    status: dict
    step: str
    """``suspending`` (updateStatusToSuspendingIfNeeded), ``reconcile`` (one pass of Reconcile), ``update``
    (updateRayJobStatus, with ``change`` applied to the status first)."""
    expected: dict
    returns: Optional[bool] = None
    cluster: bool = False
    """Whether the RayJob's RayCluster exists before the step."""
    change: dict = field(default_factory=dict)


PASSES = [
    Pass(f"{UNIT} TestUpdateStatusToSuspendingIfNeeded: Suspend is false",
         {"suspend": False}, {"jobDeploymentStatus": "Initializing"}, "suspending",
         {"jobDeploymentStatus": "Initializing"}, returns=False),
    Pass(f"{UNIT} TestUpdateStatusToSuspendingIfNeeded: Suspend is true, but the status is not allowed to transition "
         "to suspending", {"suspend": True}, {"jobDeploymentStatus": "Complete"}, "suspending",
         {"jobDeploymentStatus": "Complete"}, returns=False),
    Pass(f"{UNIT} TestUpdateStatusToSuspendingIfNeeded: Suspend is true, and the status is allowed to transition to "
         "suspending", {"suspend": True}, {"jobDeploymentStatus": "Initializing"}, "suspending",
         {"jobDeploymentStatus": "Suspending"}, returns=True),
    Pass(f"{UNIT} TestUpdateRayJobStatus: JobDeploymentStatus is not changed",
         {}, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "message": "old message"}, "update",
         {"message": "old message"}, change={"message": "new message"}),
    Pass(f"{UNIT} TestUpdateRayJobStatus: JobDeploymentStatus is changed",
         {}, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "message": "old message"}, "update",
         {"message": "new message", "jobDeploymentStatus": "Suspending"},
         change={"message": "new message", "jobDeploymentStatus": "Suspending"}),
    Pass(f"{UNIT} TestBatchSchedulerCleanupCalledWhenRayJobSuspendingOrRetrying: Suspending - cleanup succeeds, "
         "transitions to Suspended", {}, {"jobDeploymentStatus": "Suspending", "rayClusterName": "test-raycluster"},
         "reconcile", {"jobDeploymentStatus": "Suspended"}),
    Pass(f"{UNIT} TestBatchSchedulerCleanupCalledWhenRayJobSuspendingOrRetrying: Retrying - cleanup succeeds, "
         "transitions to New", {}, {"jobDeploymentStatus": "Retrying", "rayClusterName": "test-raycluster"},
         "reconcile", {"jobDeploymentStatus": ""}),
    Pass(f"{SUSPENDED} When RayJob is suspended and should not requeue",
         {"suspend": True}, {"jobDeploymentStatus": "Suspended"}, "reconcile",
         {"jobDeploymentStatus": "Suspended"}, returns=False),
    Pass(f"{SUSPENDED} When suspended RayJob transitions to New status",
         {"suspend": False}, {"jobDeploymentStatus": "Suspended", "jobStatus": "RUNNING"}, "reconcile",
         {"jobDeploymentStatus": "", "jobStatus": ""}),
    Pass(f"{SUSPENDED} RayJob suspend operation shoud be atomic: the suspend flag set back while Suspending, the "
         "cluster still there", {"suspend": False},
         {"jobDeploymentStatus": "Suspending", "rayClusterName": "test-raycluster"}, "reconcile",
         {"jobDeploymentStatus": "Suspending"}, returns=True, cluster=True),
]


@pytest.mark.parametrize("case", PASSES, ids=lambda c: c.upstream.rsplit(" ", 9)[0].split("/")[-1][:90])
def test_one_step_of_the_fake_is_kuberays(case):
    kube = FakeKubeRay(FakeJobsClient())
    job = manifest(**case.spec)
    job["status"] = copy.deepcopy(case.status)
    if case.cluster:
        kube._create_cluster(job, job["status"]["rayClusterName"])
    if case.step == "suspending":
        returned = kube._to_suspending(job)
    elif case.step == "reconcile":
        returned = kube.reconcile(job)
    else:
        original = copy.deepcopy(job["status"])
        job["status"].update(case.change)
        returned = kube._update_status(job, original)
    if case.returns is not None:
        assert returned is case.returns, case.upstream
    for key, value in case.expected.items():
        assert job["status"].get(key, "") == value, (case.upstream, key, job["status"])


def test_a_suspending_rayjob_is_suspended_once_its_cluster_is_gone_whatever_its_flag_says():
    """KubeRay's atomic suspend (rayjob_controller_suspended_test.go, "RayJob suspend operation shoud be atomic"):
    the suspend flag set back does not stop it; the next pass, its cluster gone, it is Suspended."""
    kube = FakeKubeRay(FakeJobsClient())
    job = manifest(suspend=False)
    job["status"] = {"jobDeploymentStatus": "Suspending", "rayClusterName": "c"}
    kube._create_cluster(job, "c")
    assert kube.reconcile(job) is True and "c" not in kube.clusters
    kube.reconcile(job)
    assert job["status"]["jobDeploymentStatus"] == "Suspended"


# --- a RayJob's life ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Life:
    """One of KubeRay's envtest or e2e cases: a RayJob, what its Ray job does on each attempt, what is done to it
    and when, and what KubeRay's test asserts of it at the end."""

    upstream: str
    spec: dict
    attempts: tuple
    """Each attempt's Ray job: its end (``SUCCEEDED``, ``FAILED``, ``STOPPED``), or None: it keeps running."""
    expected: dict
    """Status fields at the end."""
    states: tuple = ()
    """The order KubeRay's test sees the RayJob's ``jobDeploymentStatus`` in ("" is New), as a subsequence of the
    stored ones."""
    cluster_left: Optional[bool] = None
    """Whether a RayCluster of the RayJob's is there at the end (a minute past its end)."""
    slices_never_come: bool = False
    actions: tuple = ()
    """(status to wait for, spec change) in order: ``{"suspend": True}`` once it is Running, say."""
    clusters: Optional[int] = None
    """How many RayClusters the RayJob had."""


LIVES = [
    Life(f"{ENVTEST} Successful RayJob in K8sJobMode; {E2E} Successful RayJob", {}, ("SUCCEEDED",),
         {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "succeeded": 1, "failed": 0},
         states=("Initializing", "Running", "Complete"), cluster_left=False, clusters=1),
    Life(f"{E2E} Failing RayJob without cluster shutdown after finished", {"shutdownAfterJobFinishes": False},
         ("FAILED",), {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed"},
         cluster_left=True),
    Life(f"{E2E} Should transition to 'Complete' if the Ray job has stopped.", {}, ("STOPPED",),
         {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}),
    Life(f"{ENVTEST} RayJob has passed the ActiveDeadlineSeconds", {"activeDeadlineSeconds": 5}, (None,),
         {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"}, states=("Initializing", "Failed"),
         slices_never_come=True),
    Life(f"{E2E_RETRY} RayJob has passed ActiveDeadlineSeconds", {"backoffLimit": 2, "activeDeadlineSeconds": 5,
                                                                   "ttlSecondsAfterFinished": 600},
         (None,), {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded", "failed": 1, "succeeded": 0},
         slices_never_come=True, clusters=1),
    Life(f"{ENVTEST} Retrying RayJob in K8sJobMode", {"backoffLimit": 1}, ("FAILED", "SUCCEEDED"),
         {"jobDeploymentStatus": "Complete", "succeeded": 1, "failed": 1},
         states=("Initializing", "Running", "Retrying", "", "Initializing", "Running", "Complete"), clusters=2),
    Life(f"{E2E_RETRY} Failing RayJob with HttpMode submission mode", {"backoffLimit": 2,
                                                                        "shutdownAfterJobFinishes": False},
         ("FAILED", "FAILED", "FAILED"),
         {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed", "failed": 3, "succeeded": 0},
         clusters=3),
    Life(f"{E2E} RayJob PreRunningDeadlineSeconds expires during Initializing state",
         {"preRunningDeadlineSeconds": 5}, (None,),
         {"jobDeploymentStatus": "Failed", "reason": "PreRunningDeadlineExceeded"}, slices_never_come=True),
    Life(f"{SUSPENDED} When creating a rayjob with suspend == true", {"suspend": True}, (None,),
         {"jobDeploymentStatus": "Running"}, states=("Suspended", "", "Initializing", "Running"),
         actions=(("Suspended", {"suspend": False}),), clusters=1),
    Life(f"{E2E_SUSPEND} Suspend the RayJob when its status is 'Running', and then resume it.", {}, (None, None),
         {"jobDeploymentStatus": "Running"}, states=("Running", "Suspending", "Suspended", "", "Initializing", "Running"),
         actions=(("Running", {"suspend": True}), ("Suspended", {"suspend": False})), clusters=2),
    Life(f"{E2E_SUSPEND} Create a suspended RayJob, and then resume it.", {"suspend": True}, ("SUCCEEDED",),
         {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, states=("Suspended", "Running", "Complete"),
         actions=(("Suspended", {"suspend": False}),), cluster_left=False),
]


def live(case: Life) -> tuple[FakeKubeRay, dict]:
    """Read the RayJob as KubeRay's test watches it (``Eventually``), doing each action once its status is reached,
    until it is terminal (then once more, a minute later: the cluster's TTL) or, its actions done, as expected."""
    jobs = FakeJobsClient(final="RUNNING")
    kube = FakeKubeRay(jobs, slices_never_come=case.slices_never_come)
    kube.custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", manifest(**case.spec))
    attempts, actions = list(case.attempts), list(case.actions)
    posted = 0
    for _ in range(100):
        job = kube.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "job")
        state = job["status"].get("jobDeploymentStatus", "")
        if state in ("Complete", "Failed"):
            kube.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "job")
            return kube, job
        if actions and state == actions[0][0]:
            job["spec"].update(actions.pop(0)[1])
        elif not actions and all(job["status"].get(k, "") == v for k, v in case.expected.items()):
            return kube, job
        if len(jobs.submitted) > posted:  # KubeRay posted an attempt's job: it ends as the case says
            posted = len(jobs.submitted)
            outcome = attempts.pop(0)
            if outcome is not None:
                jobs.jobs["job"] = outcome
    raise AssertionError(f"{case.upstream}: not as expected after 100 reads: {job['status']}")


def collapsed(states: list[str]) -> list[str]:
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def is_subsequence(wanted, seen) -> bool:
    it = iter(seen)
    return all(state in it for state in wanted)


@pytest.mark.parametrize("case", LIVES, ids=lambda c: c.upstream.split(" ", 1)[1][:80])
def test_a_rayjobs_life_in_the_fake_is_kuberays(case):
    kube, job = live(case)
    for key, value in case.expected.items():
        assert job["status"].get(key, "") == value, (case.upstream, key, job["status"])
    seen = collapsed(kube.history["job"])
    assert is_subsequence(case.states, seen), (case.upstream, seen)
    if case.cluster_left is not None:
        assert bool(kube.clusters) is case.cluster_left, (case.upstream, kube.clusters)
    if case.clusters is not None:
        assert len(kube.cluster_log) == case.clusters, (case.upstream, kube.cluster_log)


def test_a_finished_rayjobs_cluster_is_deleted_once_its_ttl_has_passed():
    """``handleShutdownAfterJobFinishes``: the cluster goes ``ttlSecondsAfterFinished`` after ``status.endTime``, not
    at the end (no KubeRay test asserts the wait, so this one reads the function)."""
    jobs = FakeJobsClient(final="RUNNING")
    kube = FakeKubeRay(jobs, seconds_per_read=60)
    kube.custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs",
                                                manifest(ttlSecondsAfterFinished=120))
    read = lambda: kube.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "job")  # noqa: E731
    while "job" not in jobs.jobs:
        read()
    jobs.jobs["job"] = "SUCCEEDED"
    assert read()["status"]["jobDeploymentStatus"] == "Complete" and kube.clusters  # 0 s after the end
    read()
    assert kube.clusters  # 60 s
    read()
    assert not kube.clusters and not kube.pods  # 120 s
