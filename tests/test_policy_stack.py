"""The policy pack against resources built by the real SDKs, under Pulumi's mock engine.

Two things are checked here that hand-written props cannot prove:

* the stack program (``__main__.py`` + ``components/``) passes every rule, in
  ``dev`` and in a ``prod`` stack, and a ``prod`` stack that turns deletion
  protection off fails exactly the one rule;
* the camelCase property names and type tokens the rules read are the ones
  pulumi-gcp 10.2.0 / pulumi-kubernetes 4.34.2 actually send to the engine
  (a small program builds one failing resource per rule).

The inputs recorded by the mock engine are what the engine would pass to the
analyzer before the provider's Check; they are wrapped in the SDK's
unknown-checking proxy as the analyzer does.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from pulumi_policy.proxy import unknown_checking_proxy

from gke_ray_tpu.stack import mock_engine as offline

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from policy import policies as P  # noqa: E402
from tests.policy_eval import evaluate, evaluate_stack  # noqa: E402


def violations(run, config=None) -> dict[tuple[str, str], list[str]]:
    """``{(policy, resource name): messages}`` over every custom resource of an offline run, by the resource
    policies one resource at a time and by the stack policies over all of them."""
    found = {}
    resources = []
    for resource in run.resources:
        if not resource.custom or resource.type.startswith("pulumi:providers:"):
            continue
        props = unknown_checking_proxy(dict(resource.inputs))
        resources.append((resource.type, props, resource.urn, resource.name))
        for policy, messages in evaluate(resource.type, props, resource.urn, resource.name, config).items():
            found[(policy, resource.name)] = messages
    for (policy, urn), messages in evaluate_stack(resources, config).items():
        found[(policy, P.parse_urn(urn)[3] if urn else "")] = messages
    return found


@pytest.fixture(scope="module")
def stack_config():
    return offline.load_stack_file(ROOT / "Pulumi.dev.yaml")


@pytest.fixture(scope="module")
def dev(stack_config):
    return offline.run_offline(stack_config, stack="dev")


@pytest.fixture(scope="module")
def prod(stack_config):
    config = {k: v for k, v in stack_config.items() if k != "gke-ray-tpu:deletionProtection"}
    return offline.run_offline(config, stack="prod")


def test_dev_stack_passes_every_rule(dev):
    assert violations(dev) == {}


def test_prod_stack_with_default_deletion_protection_passes_every_rule(prod):
    assert violations(prod) == {}


def test_the_rules_really_apply_to_the_stack(prod):
    """Guard against a vacuous pass: each rule's target exists and is recognised."""
    networks = prod.of_type(P.NETWORK)
    assert len(networks) == 2
    assert all(P.parse_urn(n.urn)[2][-2] == "gke-ray-tpu:index:DcnNetworks" for n in networks)
    tpu_pools = [
        r for r in prod.of_type(P.NODE_POOL)
        if r.inputs["nodeConfig"]["machineType"].startswith(tuple(P.TPU_MACHINE_TYPE_PREFIXES))
    ]
    assert len(tpu_pools) == 2
    assert len(prod.of_type(P.BUCKET)) == 1
    assert len(prod.of_type(P.BUCKET_IAM_MEMBER)) == 2  # objectUser and the legacy bucket reader
    assert len(prod.of_type(P.CLUSTER)) == 1
    assert len(prod.of_type("kubernetes:ray.io/v1:RayCluster")) == 1
    assert len(prod.of_type(P.NETWORK_POLICY)) == 1
    assert all(P.parse_urn(r.urn)[0] == "prod" for r in prod.resources)


def test_prod_stack_without_deletion_protection_fails_only_that_rule(stack_config):
    run = offline.run_offline(stack_config, stack="prod")  # Pulumi.dev.yaml sets deletionProtection: "false"
    found = violations(run)
    assert list(found) == [("cluster-deletion-protection", "gke-cluster")]
    assert "stack 'prod'" in found[("cluster-deletion-protection", "gke-cluster")][0]


def test_a_stack_named_in_non_prod_stacks_may_drop_deletion_protection(stack_config):
    run = offline.run_offline(stack_config, stack="dev-alice")
    assert list(violations(run)) == [("cluster-deletion-protection", "gke-cluster")]
    config = {"cluster-deletion-protection": {"nonProdStacks": ["dev", "dev-*"]}}
    assert violations(run, config) == {}


BAD_PROGRAM = textwrap.dedent(
    '''
    import json
    import pulumi
    import pulumi_gcp as gcp
    import pulumi_kubernetes as k8s

    class DcnNetworks(pulumi.ComponentResource):
        def __init__(self, name):
            super().__init__("gke-ray-tpu:index:DcnNetworks", name, None, None)
            gcp.compute.Network("bad-mtu-net", name="x-net-1", mtu=1460, auto_create_subnetworks=False,
                                opts=pulumi.ResourceOptions(parent=self))
            gcp.compute.Network("auto-net", name="x-net-2", mtu=8896, auto_create_subnetworks=True,
                                opts=pulumi.ResourceOptions(parent=self))
            gcp.compute.Network("good-net", name="x-net-3", mtu=8896, auto_create_subnetworks=False,
                                opts=pulumi.ResourceOptions(parent=self))

    DcnNetworks("dcn")
    gcp.compute.Network("plain-vpc", name="plain", mtu=1460)  # not a DCN network: not checked

    gcp.container.NodePool("tpu-no-gvnic", cluster="c", node_count=4, node_config=gcp.container.NodePoolNodeConfigArgs(
        machine_type="ct6e-standard-4t", gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=False)))
    gcp.container.NodePool("tpu-gvnic", cluster="c", node_count=4, node_config=gcp.container.NodePoolNodeConfigArgs(
        machine_type="ct5p-hightpu-4t", gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True)))
    gcp.container.Cluster("unprotected", location="us-east5-b", initial_node_count=1, deletion_protection=False,
        node_pools=[gcp.container.ClusterNodePoolArgs(name="inline-tpu",
            node_config=gcp.container.ClusterNodePoolNodeConfigArgs(machine_type="tpu7x-standard-4t"))])

    gcp.storage.Bucket("open-bucket", location="US", uniform_bucket_level_access=False,
                       public_access_prevention="inherited")
    gcp.storage.BucketIAMMember("public-member", bucket="b", role="roles/storage.objectViewer", member="allUsers")
    gcp.storage.BucketIAMBinding("public-binding", bucket="b", role="roles/storage.objectViewer",
                                 members=["allAuthenticatedUsers"])
    gcp.storage.BucketIAMPolicy("public-policy", bucket="b", policy_data=json.dumps(
        {"bindings": [{"role": "roles/storage.objectViewer", "members": ["allUsers"]}]}))
    gcp.projects.IAMMember("project-storage", project="p", role="roles/storage.objectAdmin",
                           member="serviceAccount:sa@p.iam.gserviceaccount.com")
    gcp.projects.IAMBinding("project-storage-binding", project="p", role="roles/storage.admin",
                            members=["serviceAccount:sa@p.iam.gserviceaccount.com"])

    k8s.core.v1.Service("dashboard-lb", spec=k8s.core.v1.ServiceSpecArgs(
        type="LoadBalancer", selector={"ray.io/node-type": "head"},
        ports=[k8s.core.v1.ServicePortArgs(port=80, target_port="dashboard")]))
    k8s.core.v1.Service("jobs-nodeport", spec=k8s.core.v1.ServiceSpecArgs(
        type="NodePort", selector={"app": "proxy"}, ports=[k8s.core.v1.ServicePortArgs(port=8265)]))
    k8s.apiextensions.CustomResource("public-raycluster", api_version="ray.io/v1", kind="RayCluster",
        metadata={"name": "rc"}, spec={"headGroupSpec": {"serviceType": "LoadBalancer", "rayStartParams": {}}})
    # Token auth and a NetworkPolicy over its pods: passes both Ray rules.
    k8s.apiextensions.CustomResource("locked-raycluster", api_version="ray.io/v1", kind="RayCluster",
        metadata={"name": "locked", "namespace": "ns"}, spec={"authOptions": {"mode": "token"}, "headGroupSpec": {
            "rayStartParams": {}, "template": {"metadata": {"labels": {"app": "ray"}}}}})
    k8s.networking.v1.NetworkPolicy("guard", metadata=k8s.meta.v1.ObjectMetaArgs(namespace="ns"),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={"app": "ray"}), policy_types=["Ingress"]))
    '''
)

EXPECTED_BAD = {
    ("dcn-network-mtu", "bad-mtu-net"),
    ("dcn-network-custom-subnets", "auto-net"),
    ("tpu-node-pool-gvnic", "tpu-no-gvnic"),
    ("tpu-node-pool-gvnic", "unprotected"),
    ("cluster-deletion-protection", "unprotected"),
    ("bucket-public-access-prevention", "open-bucket"),
    ("bucket-uniform-access", "open-bucket"),
    ("bucket-iam-not-public", "public-member"),
    ("bucket-iam-not-public", "public-binding"),
    ("bucket-iam-not-public", "public-policy"),
    ("storage-iam-bucket-scoped", "project-storage"),
    ("storage-iam-bucket-scoped", "project-storage-binding"),
    ("ray-dashboard-not-exposed", "dashboard-lb"),
    ("ray-dashboard-not-exposed", "jobs-nodeport"),
    ("ray-dashboard-not-exposed", "public-raycluster"),
    ("ray-token-auth", "public-raycluster"),
    ("ray-pods-network-policy", "public-raycluster"),
}


def test_sdk_property_names_and_type_tokens_match_the_rules(tmp_path):
    program = tmp_path / "__main__.py"
    program.write_text(BAD_PROGRAM)
    run = offline.run_offline({"gcp:project": "p"}, stack="prod", program=program)
    found = violations(run)
    assert set(found) == EXPECTED_BAD
    # Every rule of the pack fired at least once on SDK-built resources.
    assert {policy for policy, _ in found} == {p.name for p in P.POLICIES}
    assert found[("tpu-node-pool-gvnic", "unprotected")] == [
        "cluster 'unprotected' inline node pool 'inline-tpu' runs TPU machine type tpu7x-standard-4t without "
        "gVNIC; set nodeConfig.gvnic.enabled=true (multi-network DCN NICs require gVNIC)."
    ]
    assert "targetPort 'dashboard'" in found[("ray-dashboard-not-exposed", "dashboard-lb")][0]
