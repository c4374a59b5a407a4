"""Capacity modes and slices that scale to zero: what every mode registers, and what GKE would refuse."""

from __future__ import annotations

import json

import pytest
import yaml

from components.ray_tpu_cluster import spec_from_args
from components.tpu_slice_node_pool import check_args
from core.errors import ConfigError
from core.job_spec import COLD_START_ENV_VARS, RUNTIME_ENV_VARS
from stack import preview
from stack.config import parse_stack_config
from stack.mock_engine import OfflineRun, run_offline
from stack.preflight import stack_costs
from tests.conftest import with_keys
from tests.schemas import validate_ray_cluster, validate_ray_job
from tests.test_stack_dev import RAYCLUSTER, RAYJOB, tpu_pools

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


def test_a_scale_to_zero_raycluster_autoscales_whole_slices(flex):
    manifest = flex.one(RAYCLUSTER).inputs
    assert manifest["spec"]["enableInTreeAutoscaling"] is True
    options = {key: value for key, value in manifest["spec"]["autoscalerOptions"].items() if key != "securityContext"}
    assert options == {"version": "v1", "upscalingMode": "Default", "idleTimeoutSeconds": 600}  # hardened: test_ray_security
    group = worker_group(flex)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"], group["numOfHosts"]) == (0, 0, 2, HOSTS)
    # The autoscaler derives TPU and TPU-v6e-16-head from these selectors before any pod exists.
    selector = group["template"]["spec"]["nodeSelector"]
    assert selector["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    assert selector["cloud.google.com/gke-tpu-topology"] == "4x4"


def test_declared_runs_wait_minutes_for_slices_only_on_a_scale_to_zero_stack(flex, dev_run):
    def env_of(run):
        job = run.one(RAYJOB).inputs
        validate_ray_job(job)
        return yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]

    cold = env_of(flex)
    for name, value in COLD_START_ENV_VARS.items():
        assert cold[name] == value
    assert int(cold["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"]) >= 600
    assert env_of(dev_run)["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] == RUNTIME_ENV_VARS["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"]
    # A changed runtime env is a new Ray job of the same run (KubeRay submits a job id once).
    assert flex.one(RAYJOB).inputs["spec"]["jobId"] != dev_run.one(RAYJOB).inputs["spec"]["jobId"]


@pytest.mark.parametrize(
    "changes, node, affinity",
    [
        ({}, {}, "ANY_RESERVATION"),
        ({"capacity": "spot"}, {"spot": True}, "NO_RESERVATION"),
        ({"capacity": "reservation", "reservation": "trillium"}, {}, "SPECIFIC_RESERVATION"),
    ],
    ids=["on-demand", "spot", "reservation"],
)
def test_every_mode_holds_or_scales_its_slices_as_asked(run_stack, changes, node, affinity):
    for scale in ("false", "true"):
        run = run_stack(**changes, scaleToZero=scale, idleTimeoutSeconds="900")
        for pool in tpu_pools(run):
            inputs = pool.inputs
            assert inputs["nodeConfig"]["reservationAffinity"]["consumeReservationType"] == affinity
            assert {key: inputs["nodeConfig"][key] for key in node} == node
            assert "flexStart" not in inputs["nodeConfig"]
            assert inputs["management"]["autoRepair"] is True
            if scale == "true":
                assert inputs["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": HOSTS}
                assert "nodeCount" not in inputs
            else:
                assert inputs["nodeCount"] == HOSTS and "autoscaling" not in inputs
        manifest = run.one(RAYCLUSTER).inputs
        group = worker_group(run)
        if scale == "true":
            assert manifest["spec"]["autoscalerOptions"]["idleTimeoutSeconds"] == 900
            assert (group["replicas"], group["minReplicas"]) == (0, 0)
        else:
            assert "enableInTreeAutoscaling" not in manifest["spec"]
            assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 1, 2)
        assert run.outputs["scaleToZero"] is (scale == "true")


def test_autopilot_scales_to_zero_through_the_raycluster_alone(run_stack):
    run = run_stack(clusterMode="autopilot", capacity="spot", scaleToZero="true")
    assert tpu_pools(run) == []
    group = worker_group(run)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (0, 0, 2)
    assert group["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-spot"] == "true"


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
        ({"idleTimeoutSeconds": "5"}, "gke-ray-tpu:idleTimeoutSeconds", "between 60 and 86400"),
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


def test_a_flex_start_stack_costs_about_its_cpu_pool_while_idle(dev_config):
    cfg = parse_stack_config(with_keys(dev_config, capacity="flex-start"))
    costs = {cost.capacity: cost for cost in stack_costs(cfg)}
    flex = costs["flex-start"]
    cpu = flex.cpu_usd_per_hour
    assert cpu == pytest.approx(3 * 16 * (0.031611 + 3.75 * 0.004237))  # 3 x n1-standard-16
    assert flex.idle_usd_per_hour == pytest.approx(cpu + 0.10)
    assert flex.training_usd_per_hour == pytest.approx(cpu + 0.10 + 32 * 2.70)
    # Held on demand, the same slices cost the whole TPU bill while idle; a reservation is billed either way.
    held = {cost.capacity: cost for cost in stack_costs(parse_stack_config(dev_config))}
    assert held["on-demand"].idle_usd_per_hour == pytest.approx(flex.training_usd_per_hour)
    assert costs["reservation"].idle_usd_per_hour == pytest.approx(flex.training_usd_per_hour)
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
    assert row.split()[-3:] == ["2.38", "88.78", "1,737"]  # idle $/h, training $/h, idle month
    assert "warning:" not in flex
    held = offline_preview(runs=None)
    assert "warning: this stack holds its 32 TPU chips while no run is declared: $88.78/hour idle" in held
    assert "gke-ray-tpu:scaleToZero true" in held
