"""Ray's logs and metrics outlive the RayCluster: the Ray operator add-on's logging and monitoring, under the mocks."""

from __future__ import annotations

import pytest

from gke_ray_tpu.core.errors import ConfigError
from tests.test_stack_dev import CLUSTER

OPERATOR_ON = {"enabled": True, "rayClusterLoggingConfig": {"enabled": True},
               "rayClusterMonitoringConfig": {"enabled": True}}


def test_by_default_the_add_on_sends_ray_logs_and_metrics(dev_run):
    assert dev_run.one(CLUSTER).inputs["addonsConfig"]["rayOperatorConfigs"] == [OPERATOR_ON]


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
@pytest.mark.parametrize("logging, monitoring", [("false", "true"), ("true", "false"), ("false", "false")])
def test_each_can_be_turned_off(run_stack, mode, logging, monitoring):
    run = run_stack(clusterMode=mode, rayClusterLogging=logging, rayClusterMonitoring=monitoring)
    assert run.one(CLUSTER).inputs["addonsConfig"]["rayOperatorConfigs"] == [{
        "enabled": True,
        "rayClusterLoggingConfig": {"enabled": logging == "true"},
        "rayClusterMonitoringConfig": {"enabled": monitoring == "true"},
    }]


def test_an_existing_cluster_keeps_its_own_add_on_settings(run_stack):
    run = run_stack(existingClusterName="shared-cluster", rayClusterLogging="false")
    assert [r for r in run.of_type(CLUSTER) if "addonsConfig" in r.inputs] == []


@pytest.mark.parametrize("key", ["rayClusterLogging", "rayClusterMonitoring"])
def test_a_bad_value_names_the_key(run_stack, key):
    with pytest.raises(ConfigError) as error:
        run_stack(**{key: "sometimes"})
    assert error.value.key == f"gke-ray-tpu:{key}" and "true or false" in error.value.expected
