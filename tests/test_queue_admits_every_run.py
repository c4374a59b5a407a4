"""Every kind of run a stack can declare or submit, through the fake Kueue (which assigns flavors as Kueue v0.19.2
does, held to Kueue's own cases in tests/test_kueue_upstream.py), on the queue the stack declares: each is admitted,
its head taking the host flavor for its cpu and memory, its TPU workers the slice's flavor for their chips (and, where
that Kueue counts them, their DCN NICs) and the host flavor for their cpu and memory, and its quota use is its pods'.
With a queue that covers the chips only, as the stack declared it before, no run is ever admitted.

Stacks: each capacity mode (on-demand, Spot, flex-start, a reservation, flex-start with queued provisioning), elastic
or not, the Kueue the stack installs or a cluster's own (BlockUndeclared, counting DRA claims); runs: the declared
run and every size the submit command can make (``--slices`` 1 to numSlices, elastic from elasticMinSlices). A stack
that holds its slices has no queue: its runs go to its RayCluster, which no Kueue holds.
"""

from __future__ import annotations

import copy
from decimal import Decimal

import pytest

from gke_ray_tpu.components import tpu_queue
from gke_ray_tpu.components.ray_manifests import WORKER_GROUP, ray_cluster_spec
from gke_ray_tpu.core import kueue
from gke_ray_tpu.core.kueue_quota import ray_job_pod_sets, usage
from gke_ray_tpu.core.quantities import kueue_value
from gke_ray_tpu.core.ray_job import JobCommand, OwnCluster, RayJobRun, ray_job
from gke_ray_tpu.stack.parse import parse_stack_config
from gke_ray_tpu.stack.plan import plan_stack
from tests.conftest import with_keys
from tests.fake_kueue import FakeKueue
from tests.fakes import FakeJobsClient, FakeKubeRay
from tests.schemas import validate_kueue, validate_ray_job

STACKS = {
    "on-demand": {"capacity": "on-demand", "scaleToZero": "true", "elasticMinSlices": "2"},
    "on-demand, elastic": {"capacity": "on-demand", "scaleToZero": "true"},
    "spot, elastic": {"capacity": "spot", "scaleToZero": "true"},
    "flex-start": {"capacity": "flex-start", "elasticMinSlices": "2"},
    "flex-start, elastic": {"capacity": "flex-start"},
    "reservation, elastic": {"capacity": "reservation", "reservation": "trillium-res", "scaleToZero": "true"},
    "flex-start, one slice, queued provisioning": {"capacity": "flex-start", "numSlices": "1", "queuedProvisioning": "true"},
    "flex-start, elastic, a cluster's own Kueue": {"capacity": "flex-start", "installKueue": "false"},
    "spot, a cluster's own Kueue, fixed size": {"capacity": "spot", "scaleToZero": "true", "installKueue": "false",
                                                "elasticMinSlices": "2"},
}
"""The dev stack (2 x v6e 4x4, two DCN networks, elasticMinSlices 1), changed as named."""


def stack(dev_config, keys: dict):
    plan = plan_stack(parse_stack_config(with_keys(dev_config, **keys)))
    spec = plan.cluster_spec
    objects = tpu_queue.queue_objects(plan.queue_args, spec,
                                      kueue.queue_names(spec.name, spec.namespace, "rayClusterName"))
    return plan, spec, objects


def runs(plan, spec) -> list[tuple[str, int, int | None]]:
    """(what, slices, start slices) of the declared runs and of every run the submit command can make."""
    declared = [(f"declared {run.run_name}", job.slices, job.min_slices) for run, job in zip(plan.cfg.runs, plan.jobs)]
    submitted = [(f"--slices {n}" + (f" --elastic from {start}" if start else ""), n, start)
                 for n, start in tpu_queue.submitted_runs(spec)]
    return declared + submitted


def queued_job(spec, objects, slices: int, start: int | None) -> dict:
    job = ray_job(RayJobRun("run", spec.namespace, JobCommand("python -m train", {}, "run"),
                            OwnCluster(ray_cluster_spec(spec), slices, start_slices=start),
                            labels=kueue.queue_label(objects.local_queue["metadata"]["name"])))
    validate_ray_job(job)
    return job


def admit(objects, job: dict) -> FakeKueue:
    """``job`` created in the fake Kueue of ``objects``, then one pass of its scheduler."""
    fake = FakeKueue.of(FakeKubeRay(FakeJobsClient(final="RUNNING")), objects)
    fake.custom.create_namespaced_custom_object("ray.io", "v1", job["metadata"]["namespace"], "rayjobs", job)
    fake.tick()
    return fake


def reserved(fake: FakeKueue) -> dict | None:
    workload = fake.workload_of("run")
    validate_kueue(workload)
    quota = next((c for c in workload["status"].get("conditions") or [] if c["type"] == "QuotaReserved"), {})
    return workload["status"]["admission"] if quota.get("status") == "True" else None


@pytest.mark.parametrize("name", STACKS)
def test_every_run_the_stack_declares_or_submits_is_admitted_with_a_flavor_for_each_pod_set(dev_config, name):
    plan, spec, objects = stack(dev_config, STACKS[name])
    for manifest in (*objects.flavors, objects.cluster_queue, objects.local_queue, *objects.checks):
        validate_kueue(manifest)
    tpu_flavor, host_flavor = (f["metadata"]["name"] for f in objects.flavors)
    own_kueue = objects.strategy == kueue.BLOCK_UNDECLARED
    assert own_kueue is (STACKS[name].get("installKueue") == "false")
    said = []
    for what, slices, start in runs(plan, spec):
        job = queued_job(spec, objects, slices, start)
        fake = admit(objects, job)
        admission = reserved(fake)
        assert admission is not None, f"{name}: {what} was not admitted ({fake.refused})"
        head, workers = admission["podSetAssignments"]
        assert head["flavors"] == {"cpu": host_flavor, "memory": host_flavor}, what
        tpu_resources = {kueue.TPU, kueue.DCN_NIC} if own_kueue and spec.dcn_interfaces else {kueue.TPU}
        assert workers["flavors"] == {"cpu": host_flavor, "memory": host_flavor,
                                      **{r: tpu_flavor for r in tpu_resources}}, what
        # Its quota use is its pods' requests (the first Workload's: an elastic run starts on its minimum).
        asked = usage(ray_job_pod_sets(job, objects.claim_templates))
        used = fake.used()
        assert {r: sum(v for (_, res), v in used.items() if res == r) for r in asked} == {
            r: kueue_value(r, a) for r, a in asked.items()}, what
        assert used[(tpu_flavor, kueue.TPU)] == (start or slices) * spec.shape.chips, what
        said.append(f"{what}: head {head['resourceUsage']}, {workers['name']} {workers['resourceUsage']}")
    print(f"{name}:\n  " + "\n  ".join(said))


def chips_only(objects: tpu_queue.QueueObjects) -> tpu_queue.QueueObjects:
    """The queue as the stack declared it before: one resource group, the slice's flavor, the chips alone."""
    narrowed = copy.deepcopy(objects)
    groups = narrowed.cluster_queue["spec"]["resourceGroups"]
    groups[:] = [{"coveredResources": [kueue.TPU], "flavors": [
        {"name": groups[0]["flavors"][0]["name"],
         "resources": [r for r in groups[0]["flavors"][0]["resources"] if r["name"] == kueue.TPU]}]}]
    validate_kueue(narrowed.cluster_queue)
    return narrowed


@pytest.mark.parametrize("name", ["flex-start, elastic", "flex-start, elastic, a cluster's own Kueue"])
def test_with_a_queue_covering_only_the_chips_no_run_is_ever_admitted(dev_config, name):
    plan, spec, objects = stack(dev_config, STACKS[name])
    narrowed = chips_only(objects)
    for what, slices, start in runs(plan, spec):
        fake = admit(narrowed, queued_job(spec, narrowed, slices, start))
        for _ in range(3):
            fake.tick()
        assert reserved(fake) is None, what
        if narrowed.strategy == kueue.IGNORE_UNDECLARED:
            # The head's cpu and memory are skipped, it takes no flavor, and the one-pod-set admission Kueue writes
            # is refused by the Workload CRD's rule, once per scheduling pass.
            assert len(fake.refused) == 4 and all(
                "podSetAssignments must have the same number of podSets as the spec" in r for r in fake.refused), what
        else:
            message = next(c for c in fake.workload_of("run")["status"]["conditions"] if c["type"] == "QuotaReserved")
            assert message["message"].startswith("couldn't assign flavors to pod set head: resource "), what
            assert "unavailable in ClusterQueue" in message["message"], what


def test_the_queue_holds_heads_and_workers_for_every_slice_so_only_the_chips_hold_a_run_back(dev_config):
    # The dev stack, elastic: 2 slices of 4 hosts, a head per slice with Ray's autoscaler beside it.
    plan, spec, objects = stack(dev_config, STACKS["flex-start, elastic"])
    quota = {r["name"]: r["nominalQuota"] for g in objects.cluster_queue["spec"]["resourceGroups"]
             for r in g["flavors"][0]["resources"]}
    head_cpu, head_memory = Decimal(8) + Decimal("0.5"), 16 * 2**30 + 512 * 2**20
    assert quota == {kueue.TPU: 32, "cpu": int(2 * head_cpu + 8 * 8),
                     "memory": 2 * head_memory + 8 * 200 * 10**9}
    # Two one-slice runs hold every chip and the quota of two heads: a third waits for chips, the others fit.
    fake = FakeKueue.of(FakeKubeRay(FakeJobsClient(final="RUNNING")), objects)
    for n in range(3):
        job = queued_job(spec, objects, 1, None)
        job["metadata"]["name"] = f"run-{n}"
        fake.custom.create_namespaced_custom_object("ray.io", "v1", spec.namespace, "rayjobs", job)
    fake.tick()
    held = [w for w in fake.workloads.values() if w["status"].get("admission")]
    assert len(held) == 2 and fake.used()[(objects.flavors[0]["metadata"]["name"], kueue.TPU)] == 32
    waiting = next(w for w in fake.workloads.values() if not w["status"].get("admission"))
    message = next(c for c in waiting["status"]["conditions"] if c["type"] == "QuotaReserved")["message"]
    assert f"couldn't assign flavors to pod set {WORKER_GROUP}: " in message and "google.com/tpu" in message


def test_a_stack_that_holds_its_slices_has_no_queue(dev_config):
    plan = plan_stack(parse_stack_config(with_keys(dev_config, capacity="spot", scaleToZero="false")))
    assert plan.queue_args is None and plan.queue is None
