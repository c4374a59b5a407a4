"""Test doubles for the submit path's Kubernetes side (used by tests/test_training_*.py)."""

from __future__ import annotations

from kubernetes import client as k8s


class FakeCoreV1:
    """The two CoreV1Api calls PortForward makes, for a RayCluster head service ``head-svc``."""

    def __init__(self, pods, target_port=8265):
        self.pods = pods
        self.target_port = target_port

    def read_namespaced_service(self, name, namespace):
        if name != "head-svc":
            raise k8s.ApiException(status=404, reason="Not Found")
        return k8s.V1Service(spec=k8s.V1ServiceSpec(
            selector={"ray.io/node-type": "head", "ray.io/cluster": "c"},
            ports=[k8s.V1ServicePort(port=6379), k8s.V1ServicePort(port=8265, target_port=self.target_port)],
        ))

    def list_namespaced_pod(self, namespace, label_selector):
        assert label_selector == "ray.io/cluster=c,ray.io/node-type=head"
        return k8s.V1PodList(items=self.pods)

    def connect_get_namespaced_pod_portforward(self, *args, **kwargs):
        raise NotImplementedError("a websocket to an API server; tests replace kubernetes.stream.portforward")


def pod(name, phase="Running", ready="True"):
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(
            name="ray-head", ports=[k8s.V1ContainerPort(container_port=8265, name="dashboard")])]),
        status=k8s.V1PodStatus(phase=phase, conditions=[k8s.V1PodCondition(type="Ready", status=ready)]),
    )
