"""Why a stack that scales to zero gives each run its own RayCluster: Ray's autoscaler cannot release a slice.

The installed Ray's KubeRay node provider (autoscaler v1, ``ray/autoscaler/_private/kuberay/node_provider.py``
and ``ray/autoscaler/batching_node_provider.py``) is driven here as its monitor drives it, with the Kubernetes
API calls mocked as Ray's own ``python/ray/tests/kuberay/test_kuberay_node_provider.py`` does: the RayCluster
is the one this stack builds (2 slices of v6e 4x4, so one worker group of 2 replicas of 4 hosts), its pods
carry the ``replicaIndex`` labels GKE's TPU webhook sets, and every worker is idle and terminated.

What Ray 2.60 asks of KubeRay then: ``replicas`` unchanged and all 8 pods in ``workersToDelete``. KubeRay's
controller deletes the listed pods "regardless of the value of Replicas" and creates pods again until
``replicas`` x ``numOfHosts`` run (``raycluster_controller.go``, reconcilePods), so the TPU nodes are never
released. If a later Ray lowers ``replicas`` here, the first test fails and says so: the reason for per-run
clusters would then be gone (docs/deploy.md, Capacity).
"""

from __future__ import annotations

from typing import Any

import pytest
from ray.autoscaler._private.kuberay.autoscaling_config import _generate_provider_config
from ray.autoscaler._private.kuberay.node_provider import IKubernetesHttpApiClient, KubeRayNodeProvider
from ray.autoscaler.tags import NODE_KIND_WORKER, TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE

from gke_ray_tpu.components.ray_manifests import WORKER_GROUP, ray_cluster
from gke_ray_tpu.components.ray_tpu_cluster import spec_from_args

IDENTITY = {"bucket_name": "b", "ksa_name": "ray-tpu-ksa", "namespace": "default"}
SLICES = 2


def stack_raycluster() -> dict:
    """The stack's RayCluster as the API server returns it: 2 slices of v6e 4x4, every slice running."""
    spec = spec_from_args({"workload_identity": IDENTITY, "generation": "v6e", "topology": "4x4", "num_slices": SLICES})
    manifest = ray_cluster(spec)
    (group,) = manifest["spec"]["workerGroupSpecs"]
    assert (group["replicas"], group["numOfHosts"]) == (SLICES, 4)
    return manifest


def pods(raycluster: dict) -> list[dict]:
    """The head and the workers KubeRay created, with the labels KubeRay and GKE's TPU webhook put on them."""
    name = raycluster["metadata"]["name"]
    (group,) = raycluster["spec"]["workerGroupSpecs"]

    def pod(pod_name: str, labels: dict) -> dict:
        return {
            "metadata": {"name": pod_name, "labels": {"ray.io/cluster": name, **labels}},
            "status": {"podIP": "10.0.0.1", "containerStatuses": [{"state": {"running": {}}}]},
        }

    found = [pod(f"{name}-head", {"ray.io/node-type": "head", "ray.io/group": "headgroup"})]
    for replica in range(group["replicas"]):
        for host in range(group["numOfHosts"]):
            found.append(pod(
                f"{name}-{WORKER_GROUP}-worker-r{replica}h{host}",
                # The webhook's label: <group>-<replica index>, the same on every host of a slice.
                {"ray.io/node-type": "worker", "ray.io/group": WORKER_GROUP, "replicaIndex": f"{WORKER_GROUP}-{replica}"},
            ))
    return found


class FakeKubernetesApi(IKubernetesHttpApiClient):
    """The API server, as far as the node provider asks it: the RayCluster and its pods; patches are recorded."""

    def __init__(self, raycluster: dict):
        self.raycluster = raycluster
        self.pods = pods(raycluster)
        self.patches: list[list[dict[str, Any]]] = []

    def get(self, path: str) -> dict:
        if path == f"rayclusters/{self.raycluster['metadata']['name']}":
            return self.raycluster
        if path.startswith("pods?labelSelector="):
            return {"metadata": {"resourceVersion": "1"}, "items": self.pods}
        raise AssertionError(f"unexpected GET {path}")

    def patch(self, path: str, payload: list) -> dict:
        assert path == f"rayclusters/{self.raycluster['metadata']['name']}"
        self.patches.append(payload)
        return {}

    def delete(self, path: str) -> dict:
        raise AssertionError(f"the node provider deletes nothing itself: DELETE {path}")


def provider_for(raycluster: dict) -> tuple[KubeRayNodeProvider, FakeKubernetesApi]:
    api = FakeKubernetesApi(raycluster)
    provider = KubeRayNodeProvider(
        _generate_provider_config(raycluster["metadata"]["namespace"]), raycluster["metadata"]["name"]
    )
    provider.k8s_api_client = api
    return provider, api


def idle_update(provider: KubeRayNodeProvider) -> list[str]:
    """One autoscaler update in which every worker has been idle past the timeout: all are terminated."""
    nodes = provider.non_terminated_nodes({})
    workers = [node for node in nodes if provider.node_tags(node)[TAG_RAY_NODE_KIND] == NODE_KIND_WORKER]
    assert provider.safe_to_scale()
    provider.terminate_nodes(workers)
    provider.post_process()
    return workers


def test_rays_autoscaler_does_not_release_idle_multi_host_slices():
    provider, api = provider_for(stack_raycluster())
    workers = idle_update(provider)
    assert len(workers) == SLICES * 4
    (patch,) = api.patches
    replicas = [op for op in patch if op["path"].endswith("/replicas")]
    deleted = [op["value"]["workersToDelete"] for op in patch if op["path"].endswith("/scaleStrategy")]
    assert sorted(deleted[0]) == sorted(workers), "every idle TPU pod is listed for deletion"
    assert replicas == [], (
        f"Ray's KubeRay node provider now changes replicas when idle slices go ({replicas}): it may release "
        "multi-host slices, so per-run RayClusters (docs/deploy.md, Capacity) may no longer be needed; "
        "check KubeRay's controller and update the docs and this test"
    )
    # What KubeRay does with that: the group still wants 2 replicas of 4 hosts, so it recreates all 8 pods.
    (group,) = api.raycluster["spec"]["workerGroupSpecs"]
    assert group["replicas"] * group["numOfHosts"] == len(workers)


def test_the_replica_count_it_asks_for_is_pods_not_slices():
    """It counts pods where KubeRay's replicas are slices: asking for one more pod asks for 9 replicas, and
    only the maxReplicas cap (2) keeps that from a patch."""
    provider, api = provider_for(stack_raycluster())
    provider.non_terminated_nodes({})
    assert provider.cur_num_workers()[WORKER_GROUP] == SLICES * 4  # pods, while KubeRay's replicas are slices
    provider.create_node({}, {TAG_RAY_USER_NODE_TYPE: WORKER_GROUP}, 1)
    provider.post_process()
    operations = [op for patch in api.patches for op in patch]
    assert operations == [], "9 pods asked for, capped to maxReplicas (2 slices), equal to the current 2: no change"


@pytest.mark.parametrize("replicas_asked", [1, 2])
def test_terminating_one_host_lists_its_whole_slice_and_keeps_replicas(replicas_asked):
    provider, api = provider_for(stack_raycluster())
    nodes = provider.non_terminated_nodes({})
    first = sorted(n for n in nodes if "-worker-" in n)[: replicas_asked * 4 : 4]  # host 0 of the first slices
    provider.terminate_nodes(first)
    provider.post_process()
    (patch,) = api.patches
    (deleted,) = [op["value"]["workersToDelete"] for op in patch if op["path"].endswith("/scaleStrategy")]
    assert len(deleted) == replicas_asked * 4
    assert not [op for op in patch if op["path"].endswith("/replicas")]
    assert {name.rsplit("h", 1)[0] for name in deleted} == {f"{n.rsplit('h', 1)[0]}" for n in first}


# --- how an elastic run's cluster grows: autoscaler v2, the one an elastic run's cluster runs --------------------


def elastic_raycluster() -> dict:
    """An elastic run's cluster as the builder makes it (gke_ray_tpu.core.ray_job.elastic_cluster): it started on 1
    of 2 slices, and that slice's 4 hosts run."""
    from gke_ray_tpu.core.ray_job import AUTOSCALER_VERSION, with_slices
    from gke_ray_tpu.components.ray_manifests import ray_cluster_spec

    spec = spec_from_args({"workload_identity": IDENTITY, "capacity": "spot", "scale_to_zero": True})
    cluster = with_slices(ray_cluster_spec(spec), SLICES, start_slices=1)
    assert cluster["autoscalerOptions"]["version"] == AUTOSCALER_VERSION == "v2"
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "elastic-x7k2p", "namespace": "default"}, "spec": cluster}


def v2_provider(raycluster: dict):
    from ray.autoscaler.v2.instance_manager.cloud_providers.kuberay.cloud_provider import KubeRayProvider

    api = FakeKubernetesApi(raycluster)
    return KubeRayProvider(raycluster["metadata"]["name"], {"namespace": "default"}, gcs_client=None,
                           k8s_api_client=api), api


@pytest.mark.parametrize("hosts_asked, replicas", [(4, 2), (8, 2), (2, None)])
def test_the_v2_autoscaler_grows_a_multi_host_group_by_whole_slices_up_to_max_replicas(hosts_asked, replicas):
    """What Ray 2.60's v2 KubeRay provider patches when Ray Train asks for more TPU hosts: the hosts divided by
    numOfHosts, capped at maxReplicas (the run's slices); a part of a slice asks for no slice at all."""
    raycluster = elastic_raycluster()
    (group,) = raycluster["spec"]["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"], group["numOfHosts"]) == (1, 1, 2, 4)
    provider, api = v2_provider(raycluster)
    provider.launch({WORKER_GROUP: hosts_asked}, request_id=f"grow-{hosts_asked}")
    patched = [op["value"] for patch in api.patches for op in patch if op["path"].endswith("/replicas")]
    assert patched == ([] if replicas is None else [replicas])
