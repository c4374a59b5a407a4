"""Capacity modes and slices that scale to zero: what every mode registers, and what GKE would refuse."""

from __future__ import annotations

import json

import pytest
import yaml

from gke_ray_tpu.components.ray_tpu_cluster import spec_from_args
from gke_ray_tpu.components.tpu_slice_node_pool import check_args
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import COLD_START_ENV_VARS, RUNTIME_ENV_VARS
from gke_ray_tpu.core.kuberay import ray_job_problems
from gke_ray_tpu.stack import preview
from gke_ray_tpu.stack.parse import parse_stack_config
from gke_ray_tpu.stack.mock_engine import MockGke, OfflineRun, run_offline
from gke_ray_tpu.stack.checks import stack_costs
from tests.conftest import with_keys
from tests.schemas import validate_ray_cluster, validate_ray_job
from tests.test_stack_dev import NODE_POOL, RAYCLUSTER, RAYJOB, tpu_pools

IDENTITY = {"bucket_name": "b", "ksa_name": "ray-tpu-ksa", "namespace": "default"}
"""A GcsWorkloadIdentity as RayTpuCluster sees it."""

HOSTS = 4  # a v6e 4x4 slice


def worker_group(run) -> dict:
    manifest = run.one(RAYCLUSTER).inputs
    validate_ray_cluster(manifest)  # the vendored KubeRay CRD, unknown fields refused
    (group,) = manifest["spec"]["workerGroupSpecs"]
    return group


@pytest.fixture(scope="module")
def flex(run_stack):
    return run_stack(capacity="flex-start", maxRunDuration="86400")


def test_flex_start_pools_are_dws_slices_that_start_empty(flex):
    pools = tpu_pools(flex)
    assert len(pools) == 2
    for pool in pools:
        inputs = pool.inputs
        node = inputs["nodeConfig"]
        assert node["flexStart"] is True and node["maxRunDuration"] == "86400s"
        assert "spot" not in node
        assert node["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
        assert inputs["management"] == {"autoRepair": False, "autoUpgrade": True}
        assert inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
        assert inputs["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": HOSTS, "locationPolicy": "ANY"}
        assert inputs["initialNodeCount"] == 0 and "nodeCount" not in inputs
    assert flex.outputs["capacity"] == "flex-start" and flex.outputs["scaleToZero"] is True


def run_cluster_group(run) -> dict:
    """The TPU worker group of the RayCluster the stack's declared run brings (a scale-to-zero stack)."""
    job = run.one(RAYJOB).inputs
    validate_ray_job(job)  # the vendored KubeRay CRD, unknown fields refused
    assert ray_job_problems(job) == []
    (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    return group


def test_a_scale_to_zero_stack_keeps_no_raycluster_and_each_run_brings_and_deletes_its_own(flex, dev_run):
    assert flex.of_type(RAYCLUSTER) == []
    job = flex.one(RAYJOB).inputs["spec"]
    assert job["shutdownAfterJobFinishes"] is True and "clusterSelector" not in job
    assert "enableInTreeAutoscaling" not in job["rayClusterSpec"] and "autoscalerOptions" not in job["rayClusterSpec"]
    group = run_cluster_group(flex)
    # Every slice of the stack, all hosts each, started with the run's cluster and gone with it.
    assert (group["replicas"], group["numOfHosts"]) == (2, HOSTS)
    selector = group["template"]["spec"]["nodeSelector"]
    assert selector["cloud.google.com/gke-flex-start"] == "true" and "cloud.google.com/gke-spot" not in selector
    assert selector["cloud.google.com/gke-tpu-topology"] == "4x4"
    assert group["template"]["spec"]["resourceClaims"] == [
        {"name": "netdev", "resourceClaimTemplateName": "maxtext-tpu-cluster-dcn-netdev"}
    ]
    assert flex.one("kubernetes:resource.k8s.io/v1:ResourceClaimTemplate").inputs["metadata"]["name"] == (
        "maxtext-tpu-cluster-dcn-netdev"
    )
    # The submit command builds its runs' clusters from the same spec, read from the stack's outputs.
    assert flex.outputs["rayClusterSpec"] == job["rayClusterSpec"]
    assert dev_run.outputs.get("rayClusterSpec") is None
    held = dev_run.one(RAYCLUSTER).inputs["spec"]
    assert {key: value for key, value in held.items()} == {
        **job["rayClusterSpec"],
        "workerGroupSpecs": held["workerGroupSpecs"],
    }, "a run's cluster is the held RayCluster's spec but its capacity selector"


@pytest.mark.parametrize(
    "changes, key, expected",
    [
        ({"capacity": "preemptible"}, "gke-ray-tpu:capacity", "one of on-demand, spot, flex-start, reservation"),
        ({"capacity": "reservation"}, "gke-ray-tpu:reservation", "a reservation's name"),
        ({"reservation": "r1"}, "gke-ray-tpu:reservation", "only that mode consumes a named reservation (capacity is on-demand)"),
        ({"capacity": "flex-start", "reservation": "r1"}, "gke-ray-tpu:reservation", "capacity is flex-start"),
        ({"capacity": "flex-start", "scaleToZero": "false"}, "gke-ray-tpu:scaleToZero", "the pool autoscales from 0"),
        ({"capacity": "flex-start", "tpuGeneration": "v4", "tpuTopology": "2x2x4", "dcnCidrs": None},
         "gke-ray-tpu:capacity", "GKE offers flex-start for v5e, v5p, v6e, not v4"),
        ({"capacity": "flex-start", "clusterMode": "autopilot"}, "gke-ray-tpu:capacity", "on-demand or spot on Autopilot"),
        ({"capacity": "reservation", "reservation": "r1", "clusterMode": "autopilot"}, "gke-ray-tpu:capacity",
         "on-demand or spot on Autopilot"),
        ({"capacity": "flex-start", "dcnCidrs": "[]", "clusterVersion": "1.32"}, "gke-ray-tpu:clusterVersion",
         "1.33.0-gke.1712000 or later: GKE provisions TPUs with flex-start"),
        ({"capacity": "flex-start", "dcnCidrs": "[]", "clusterVersion": "1.33.0-gke.1711999"},
         "gke-ray-tpu:clusterVersion", "1.33.0-gke.1712000 or later"),
        ({"capacity": "spot", "maxRunDuration": "3600"}, "gke-ray-tpu:maxRunDuration", "bounds flex-start nodes only"),
        ({"capacity": "flex-start", "maxRunDuration": "604801"}, "gke-ray-tpu:maxRunDuration", "between 1 and 604800"),
        ({"scaleToZero": "sometimes"}, "gke-ray-tpu:scaleToZero", "true or false"),
        ({"capacity": "flex-start", "idleTimeoutSeconds": "600"}, "gke-ray-tpu:idleTimeoutSeconds",
         "each run brings its own RayCluster and KubeRay deletes it when the run ends"),
        ({"runs": json.dumps([{"name": "r", "backoffLimit": 1}])}, "gke-ray-tpu:runs[0].backoffLimit",
         "retries, each on a new cluster, need scaleToZero"),
        ({"capacity": "flex-start", "runs": json.dumps([{"name": "r", "backoffLimit": -1}])},
         "gke-ray-tpu:runs[0].backoffLimit", "an integer >= 0"),
        ({"spot": "true"}, "gke-ray-tpu:spot", "gke-ray-tpu:capacity instead"),
    ],
)
def test_combinations_gke_refuses_fail_before_anything_is_registered(dev_config, changes, key, expected):
    run = OfflineRun()
    with pytest.raises(ConfigError) as error:
        run_offline(with_keys(dev_config, **changes), run=run)
    assert error.value.key == key and expected in error.value.expected, error.value
    assert run.resources == []


def test_flex_start_from_the_version_that_has_it(dev_config):
    # Only the config: the mock engine's Rapid channel no longer offers 1.33 (preview asks GKE).
    for version in ("1.33", "1.33.0-gke.1712000"):
        cfg = parse_stack_config(with_keys(dev_config, capacity="flex-start", dcnCidrs="[]", clusterVersion=version))
        assert cfg.scale_to_zero_or_default is True


@pytest.mark.parametrize(
    "args, key, expected",
    [
        ({"capacity": "flex-start", "scale_to_zero": False}, "TpuSliceNodePoolArgs.scale_to_zero", "autoscales from 0"),
        ({"capacity": "spot", "reservation": "r1"}, "TpuSliceNodePoolArgs.reservation", "capacity is spot"),
        ({"max_run_duration_s": 60}, "TpuSliceNodePoolArgs.max_run_duration_s", "bounds flex-start nodes only"),
        ({"capacity": "flex-start", "generation": "tpu7x", "topology": "2x2x2"}, "TpuSliceNodePoolArgs.capacity", "not tpu7x"),
    ],
)
def test_the_component_alone_refuses_under_its_argument(args, key, expected):
    with pytest.raises(ConfigError) as error:
        check_args({"cluster": None, "zone": "us-east5-b", **args})
    assert error.value.key == key and expected in error.value.expected


def test_the_raycluster_component_refuses_a_capacity_its_compute_class_cannot_ask_for():
    with pytest.raises(ConfigError) as error:
        spec_from_args({"workload_identity": IDENTITY, "compute_class": "c-tpu", "capacity": "flex-start"})
    assert error.value.key == "RayTpuClusterArgs.capacity"
    with pytest.raises(ConfigError, match="RayTpuClusterArgs.capacity='ondemand'"):
        spec_from_args({"workload_identity": IDENTITY, "capacity": "ondemand"})


def test_a_flex_start_stack_costs_the_gke_fee_and_one_small_node_while_idle(dev_config):
    cfg = parse_stack_config(with_keys(dev_config, capacity="flex-start"))
    costs = {cost.capacity: cost for cost in stack_costs(cfg)}
    flex = costs["flex-start"]
    system = 0.021811 + 4 * 0.002923  # one e2-medium (shared core: 1 vCPU, 4 GiB)
    head = 16 * (0.031611 + 3.75 * 0.004237)  # one n1-standard-16 for the running run's Ray head
    assert flex.idle_usd_per_hour == pytest.approx(system + 0.10, rel=1e-3)
    assert flex.training_usd_per_hour == pytest.approx(system + head + 0.10 + 32 * 2.70, rel=1e-3)
    assert flex.idle_usd_per_hour <= 0.01 * flex.training_usd_per_hour
    # Held on demand, the same slices and the whole CPU pool cost as much idle as training; a reservation is billed either way.
    held = {cost.capacity: cost for cost in stack_costs(parse_stack_config(dev_config))}
    assert held["on-demand"].idle_usd_per_hour == pytest.approx(held["on-demand"].training_usd_per_hour)
    assert held["on-demand"].idle_usd_per_hour > 32 * 2.70 + 3 * head
    assert costs["reservation"].idle_usd_per_hour > 32 * 2.70
    assert held["spot"].training_usd_per_hour < held["on-demand"].training_usd_per_hour


def test_preview_prints_the_cost_per_mode_and_warns_about_slices_held_for_nothing(dev_config, tmp_path, capsys):
    def offline_preview(**changes) -> str:
        path = tmp_path / "Pulumi.costs.yaml"
        config = {key: (json.loads(value) if key.endswith(":runs") else value)
                  for key, value in with_keys(dev_config, **changes).items()}
        path.write_text(yaml.safe_dump({"config": config}))
        assert preview.main(["--config-file", str(path), "--section", "training"]) == 0
        return capsys.readouterr().out

    flex = offline_preview(capacity="flex-start")
    row = next(line for line in flex.splitlines() if line.startswith("* flex-start"))
    idle, training, month = (float(value.replace(",", "")) for value in row.split()[-3:])
    assert 0 < idle <= 0.01 * training and month == pytest.approx(idle * 730, rel=0.05)  # idle is rounded to cents
    assert "system pool 1 x e2-medium" in flex and "Ray head pool 0-3 x n1-standard-16" in flex
    # The only warning is the 8B's HBM estimate, too close to XLA's limit to call (tests/test_preflight_and_plan.py).
    assert [line for line in flex.splitlines() if "warning:" in line and "within the estimate's error" not in line] == []
    held = offline_preview(runs=None)
    assert "warning: this stack holds its 32 TPU chips while no run is declared: $" in held
    assert "gke-ray-tpu:scaleToZero true" in held


def test_a_run_with_its_own_cluster_may_retry_on_a_new_one(run_stack):
    run = run_stack(capacity="flex-start", runs=json.dumps([{"name": "r", "backoffLimit": 2, "activeDeadlineSeconds": 7200}]))
    job = run.one(RAYJOB).inputs
    assert ray_job_problems(job) == []
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (2, 7200)
    assert run.outputs["runs"][0]["submissionId"] == job["spec"]["jobId"]


def test_an_idle_scale_to_zero_stack_keeps_one_small_system_node_and_no_ray_head(flex, dev_run):
    system = flex.one(NODE_POOL, "gke-system-pool").inputs
    assert (system["nodeConfig"]["machineType"], system["nodeCount"]) == ("e2-medium", 1)
    heads = flex.one(NODE_POOL, "gke-cpu-pool").inputs
    assert heads["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 3}
    assert heads["initialNodeCount"] == 0 and "nodeCount" not in heads
    # A held stack: one fixed pool for the head and the system pods, as the tutorial's.
    assert [p.name for p in dev_run.of_type(NODE_POOL) if p.name == "gke-system-pool"] == []
    assert dev_run.one(NODE_POOL, "gke-cpu-pool").inputs["nodeCount"] == 3


def test_node_pools_with_fixed_names_are_deleted_before_they_are_replaced(flex, run_stack):
    ironwood = run_stack(tpuGeneration="tpu7x", tpuTopology="2x2x2", dcnCidrs=None, numSlices="1", runs=None)
    for run in (flex, ironwood):
        for pool in run.of_type(NODE_POOL):
            assert pool.delete_before_replace, f"{pool.name} would be created again under its own name first"
    (policy,) = ironwood.of_type("gcp:compute/resourcePolicy:ResourcePolicy")
    assert policy.delete_before_replace


@pytest.mark.parametrize(
    "deployed, changes, named",
    [
        ({"capacity": "on-demand", "scaleToZero": False}, {"capacity": "flex-start"},
         ["gke-ray-tpu:capacity on-demand -> flex-start", "gke-ray-tpu:scaleToZero false -> true"]),
        ({"capacity": "on-demand", "scaleToZero": False, "topology": "4x8"}, {}, ["gke-ray-tpu:tpuTopology 4x8 -> 4x4"]),
        ({"capacity": "spot", "scaleToZero": True, "tpuGeneration": "v6e"}, {"capacity": "spot", "scaleToZero": "true"}, []),
        ({}, {"capacity": "flex-start"}, []),  # never deployed
    ],
)
def test_preview_warns_when_a_change_recreates_the_deployed_slices(dev_config, deployed, changes, named):
    run = run_offline(with_keys(dev_config, **changes), gke=MockGke(deployed_outputs=deployed))
    warnings = [message for level, message in run.logs if level == "warning" and "every run on the slices stops" in message]
    if not named:
        assert warnings == []
        return
    (warning,) = warnings
    for change in named:
        assert change in warning
    assert "TPU node pools are deleted and created again" in warning
