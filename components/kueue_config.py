"""Kueue's own configuration as the stack installs it: the Helm chart, its ``managerConfig`` and its feature gates
(Kueue v0.19.2, ``charts/kueue``).
"""

from __future__ import annotations

import yaml

from gke_ray_tpu.core.kueue import IGNORE_UNDECLARED
from gke_ray_tpu.core.kueue_waiting import WaitSettings

KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_NAMESPACE = "kueue-system"
FEATURE_GATES = {"KueueDRAIntegration": False, "KueueDRARejectWorkloadsWhenDRADisabled": False}
"""The installed Kueue's DRA accounting, off (both Beta and on by default since 0.18, ``pkg/features/kube_features.go``):
with it off Kueue neither counts nor refuses the DCN claims of the TPU workers (``core/workload_controller.go``)."""
RAY_FRAMEWORKS = ("batch/job", "ray.io/rayjob", "ray.io/raycluster")
"""The integrations the stack's Kueue runs: RayJobs, and RayClusters because an elastic run's cluster gets its
scheduling gates from the RayCluster webhook (``raycluster_webhook.go``). batch/job is Kueue's own default."""


def manager_config(wait: WaitSettings) -> dict:
    """Kueue's Configuration for the Helm chart's ``managerConfig.controllerManagerConfigYaml``.

    The chart renders that YAML as the whole configuration (``templates/manager/manager-config.yaml`` adds
    only ``internalCertManagement``), so the settings of the chart's default (``charts/kueue/values.yaml``) are
    repeated here, less its integrations: the stack's Kueue runs the Ray ones only."""
    config: dict = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 300, "burst": 500},
        "waitForPodsReady": {
            "timeout": f"{wait.timeout_s}s",
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": wait.backoff_base_s,
                "backoffMaxSeconds": wait.backoff_max_s,
                **({"backoffLimitCount": wait.requeue_limit} if wait.requeue_limit is not None else {}),
            },
        },
        "integrations": {"frameworks": list(RAY_FRAMEWORKS)},
        "resources": {"quotaCheckStrategy": IGNORE_UNDECLARED},
    }
    return config


def helm_values(wait: WaitSettings) -> dict:
    """The chart values the stack sets: its configuration and :data:`FEATURE_GATES` (``controllerManager.featureGates``,
    ``charts/kueue/values.yaml``), nothing else (the chart pins the image)."""
    return {"controllerManager": {"featureGates": [{"name": name, "enabled": on} for name, on in FEATURE_GATES.items()]},
            "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(wait),
                                                                            sort_keys=False)}}
