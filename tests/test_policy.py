"""Each CrossGuard rule against resources that pass and resources that fail.

The validators are called directly with ``ResourceValidationArgs``, the same
object the analyzer builds from the engine's request; ``props`` use the
engine's camelCase names (``tests/test_policy_stack.py`` checks those names
against the installed SDKs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResourceOptions,
    ResourceValidationArgs,
)
from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE, UnknownValueError, unknown_checking_proxy

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from policy import policies as P  # noqa: E402
from tests.policy_eval import evaluate, evaluate_stack  # noqa: E402

DCN_PARENT = "gke-ray-tpu:index:DcnNetworks"


def urn(type_: str, name: str, stack: str = "prod", parents: tuple[str, ...] = ()) -> str:
    return f"urn:pulumi:{stack}::gke-ray-tpu::{'$'.join((*parents, type_))}::{name}"


def run(policy, type_: str, props: dict, *, name: str = "res", stack: str = "prod", parents=(), config=None):
    """Messages ``policy`` reports for one resource."""
    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)
    args = ResourceValidationArgs(type_, props, urn(type_, name, stack, parents), name, opts, None, config)
    messages: list[str] = []

    def report_violation(message, violation_urn=None):
        messages.append(message)

    assert policy.validate(args, report_violation) is None  # synchronous validators
    return messages


def only(found: dict, policy_name: str) -> list[str]:
    """Assert that exactly ``policy_name`` fired across the whole pack; return its messages."""
    assert set(found) == {policy_name}, found
    return found[policy_name]


# ----------------------------------------------------------------------------- pack shape


def test_pack_lists_the_eleven_rules_all_mandatory():
    names = [p.name for p in P.POLICIES]
    assert names == [
        "dcn-network-mtu",
        "dcn-network-custom-subnets",
        "tpu-node-pool-gvnic",
        "bucket-public-access-prevention",
        "bucket-uniform-access",
        "bucket-iam-not-public",
        "storage-iam-bucket-scoped",
        "ray-dashboard-not-exposed",
        "ray-token-auth",
        "ray-pods-network-policy",
        "cluster-deletion-protection",
    ]
    assert all(p.enforcement_level is EnforcementLevel.MANDATORY for p in P.POLICIES)
    assert all(p.description and p.severity is not None for p in P.POLICIES)
    assert P.PACK_NAME == "gke-ray-tpu-guardrails"


def test_config_schema_defaults_match_code_defaults():
    schema = {p.name: (p.config_schema.properties if p.config_schema else {}) for p in P.POLICIES}
    assert schema["dcn-network-mtu"]["mtu"]["default"] == 8896
    assert schema["dcn-network-mtu"]["dcnComponentTypes"]["default"] == [DCN_PARENT]
    assert schema["tpu-node-pool-gvnic"]["tpuMachineTypePrefixes"]["default"] == [
        "ct4p-", "ct5lp-", "ct5p-", "ct6e-", "tpu7x-"
    ]
    assert schema["cluster-deletion-protection"]["nonProdStacks"]["default"] == ["dev"]
    assert schema["ray-dashboard-not-exposed"]["allowInternalLoadBalancer"]["default"] is False
    # GCS, dashboard / Jobs API, client, and the dashboard agent every Ray pod runs: all run code they are sent.
    assert schema["ray-dashboard-not-exposed"]["rayPorts"]["default"] == [6379, 8265, 10001, 52365]
    # Every schema is valid JSON (it travels to the engine as a protobuf Struct).
    json.dumps(schema)


def test_every_config_key_is_described_and_its_default_fits_its_own_schema():
    keys = [(p.name, key, spec) for p in P.POLICIES if p.config_schema
            for key, spec in p.config_schema.properties.items()]
    assert len(keys) == 12
    for policy, key, spec in keys:
        assert spec.get("description"), (policy, key)
        jsonschema.validate(spec["default"], spec)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(["8265"], P._option([8265], "ports", int))


def test_parse_urn_reads_stack_project_and_full_type_chain():
    u = "urn:pulumi:prod::gke-ray-tpu::gke-ray-tpu:index:GkeRayCluster$gke-ray-tpu:index:DcnNetworks$gcp:compute/network:Network::dcn-net-1"
    stack, project, chain, name = P.parse_urn(u)
    assert (stack, project, name) == ("prod", "gke-ray-tpu", "dcn-net-1")
    assert chain == ["gke-ray-tpu:index:GkeRayCluster", DCN_PARENT, P.NETWORK]
    with pytest.raises(ValueError):
        P.parse_urn("arn:aws:s3:::bucket")


# ----------------------------------------------------------------------------- DCN MTU + custom subnets

GOOD_DCN = {"name": "ray-tpu-net-1", "mtu": 8896, "autoCreateSubnetworks": False}


def test_dcn_network_with_jumbo_mtu_and_custom_subnets_passes():
    assert evaluate(P.NETWORK, GOOD_DCN, urn(P.NETWORK, "dcn-net-1", parents=(DCN_PARENT,))) == {}


@pytest.mark.parametrize("mtu", [1460, 1500, 8500])
def test_dcn_network_with_wrong_mtu_fails(mtu):
    messages = run(P.dcn_network_mtu, P.NETWORK, {**GOOD_DCN, "mtu": mtu}, name="dcn-net-2", parents=(DCN_PARENT,))
    assert messages == [f"DCN network 'dcn-net-2' has mtu={mtu}; DCN networks need mtu=8896."]


def test_dcn_network_without_mtu_fails_because_gcp_defaults_to_1460():
    props = {"name": "ray-tpu-net-1", "autoCreateSubnetworks": False}
    messages = only(evaluate(P.NETWORK, props, urn(P.NETWORK, "dcn-net-1", parents=(DCN_PARENT,))), "dcn-network-mtu")
    assert "1460" in messages[0] and "mtu=8896" in messages[0]


def test_dcn_rule_follows_the_component_through_nested_parents():
    parents = ("gke-ray-tpu:index:GkeRayCluster", DCN_PARENT)
    assert run(P.dcn_network_mtu, P.NETWORK, {**GOOD_DCN, "mtu": 1460}, parents=parents) != []


def test_networks_outside_the_dcn_component_are_not_checked():
    props = {"name": "default", "mtu": 1460, "autoCreateSubnetworks": True}
    assert evaluate(P.NETWORK, props, urn(P.NETWORK, "vpc")) == {}
    # A different component is not a DCN parent either.
    assert evaluate(P.NETWORK, props, urn(P.NETWORK, "vpc", parents=("gke-ray-tpu:index:GkeRayCluster",))) == {}


def test_dcn_name_patterns_cover_networks_created_without_the_component():
    props = {"name": "ray-tpu-net-1", "mtu": 1460, "autoCreateSubnetworks": False}
    config = {"dcnNetworkNamePatterns": ["*-net-*"]}
    assert run(P.dcn_network_mtu, P.NETWORK, props, name="handmade", config=config) == [
        "DCN network 'handmade' has mtu=1460; DCN networks need mtu=8896."
    ]
    assert run(P.dcn_network_mtu, P.NETWORK, {**props, "name": "other-vpc"}, name="x", config=config) == []


def test_dcn_mtu_is_configurable_and_accepts_engine_floats():
    # Config arrives through protobuf Struct, where every number is a float.
    props = {**GOOD_DCN, "mtu": 1500}
    assert run(P.dcn_network_mtu, P.NETWORK, props, parents=(DCN_PARENT,), config={"mtu": 1500.0}) == []
    assert run(P.dcn_network_mtu, P.NETWORK, GOOD_DCN, parents=(DCN_PARENT,), config={"mtu": 1500.0}) == [
        "DCN network 'res' has mtu=8896; DCN networks need mtu=1500."
    ]


@pytest.mark.parametrize("props", [{"mtu": 8896, "autoCreateSubnetworks": True}, {"mtu": 8896}])
def test_dcn_network_in_auto_subnet_mode_fails(props):
    found = evaluate(P.NETWORK, props, urn(P.NETWORK, "dcn-net-1", parents=(DCN_PARENT,)))
    assert "autoCreateSubnetworks=false" in only(found, "dcn-network-custom-subnets")[0]


# ----------------------------------------------------------------------------- gVNIC on TPU pools


def pool(machine_type: str, gvnic=None) -> dict:
    node_config = {"machineType": machine_type, "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    if gvnic is not None:
        node_config["gvnic"] = {"enabled": gvnic}
    return {"cluster": "ray-tpu", "nodeCount": 4, "nodeConfig": node_config}


def test_tpu_pool_with_gvnic_passes():
    assert evaluate(P.NODE_POOL, pool("ct6e-standard-4t", True), urn(P.NODE_POOL, "slice-0-pool")) == {}


@pytest.mark.parametrize(
    "machine_type", ["ct4p-hightpu-4t", "ct5lp-hightpu-4t", "ct5p-hightpu-4t", "ct6e-standard-4t", "tpu7x-standard-4t"]
)
@pytest.mark.parametrize("gvnic", [None, False])
def test_tpu_pool_without_gvnic_fails(machine_type, gvnic):
    found = evaluate(P.NODE_POOL, pool(machine_type, gvnic), urn(P.NODE_POOL, "slice-0-pool"))
    assert only(found, "tpu-node-pool-gvnic") == [
        f"node pool 'slice-0-pool' runs TPU machine type {machine_type} without gVNIC; set "
        "nodeConfig.gvnic.enabled=true (multi-network DCN NICs require gVNIC)."
    ]


def test_cpu_pool_without_gvnic_is_not_a_tpu_pool():
    assert run(P.tpu_node_pool_gvnic, P.NODE_POOL, pool("n1-standard-16")) == []
    assert run(P.tpu_node_pool_gvnic, P.NODE_POOL, {"cluster": "c"}) == []  # no nodeConfig at all


def test_inline_cluster_node_pools_are_checked_too():
    props = {
        "deletionProtection": True,
        "nodePools": [
            {"name": "cpu", "nodeConfig": {"machineType": "e2-standard-8"}},
            {"name": "tpu", "nodeConfig": {"machineType": "ct5p-hightpu-4t"}},
        ],
        "nodeConfig": {"machineType": "ct6e-standard-4t", "gvnic": {"enabled": False}},
    }
    assert run(P.tpu_node_pool_gvnic, P.CLUSTER, props, name="gke") == [
        "cluster 'gke' default node pool runs TPU machine type ct6e-standard-4t without gVNIC; set "
        "nodeConfig.gvnic.enabled=true (multi-network DCN NICs require gVNIC).",
        "cluster 'gke' inline node pool 'tpu' runs TPU machine type ct5p-hightpu-4t without gVNIC; set "
        "nodeConfig.gvnic.enabled=true (multi-network DCN NICs require gVNIC).",
    ]


def test_tpu_prefixes_are_configurable():
    config = {"tpuMachineTypePrefixes": ["ct9-"]}
    assert run(P.tpu_node_pool_gvnic, P.NODE_POOL, pool("ct6e-standard-4t"), config=config) == []
    assert len(run(P.tpu_node_pool_gvnic, P.NODE_POOL, pool("ct9-future-4t"), config=config)) == 1


def test_every_machine_type_in_the_tpu_catalogue_is_recognised_as_tpu():
    from gke_ray_tpu.core.tpu_catalogue import GENERATIONS

    machine_types = set()
    for gen in GENERATIONS.values():
        machine_types.add(gen.multi_host_machine_type)
        machine_types.update(gen.single_host_machine_types.values())
    assert machine_types
    for machine_type in sorted(machine_types):
        assert machine_type.startswith(tuple(P.TPU_MACHINE_TYPE_PREFIXES)), machine_type
        assert len(run(P.tpu_node_pool_gvnic, P.NODE_POOL, pool(machine_type))) == 1, machine_type


# ----------------------------------------------------------------------------- buckets

GOOD_BUCKET = {
    "name": "my-tpu-project-maxtext-checkpoints",
    "location": "us-east5",
    "uniformBucketLevelAccess": True,
    "publicAccessPrevention": "enforced",
}


def test_private_uniform_bucket_passes():
    assert evaluate(P.BUCKET, GOOD_BUCKET, urn(P.BUCKET, "storage-bucket")) == {}


@pytest.mark.parametrize("value,shown", [("inherited", "'inherited'"), (None, "unset (GCP default 'inherited')")])
def test_bucket_without_enforced_public_access_prevention_fails(value, shown):
    props = {k: v for k, v in GOOD_BUCKET.items() if k != "publicAccessPrevention"}
    if value is not None:
        props["publicAccessPrevention"] = value
    found = evaluate(P.BUCKET, props, urn(P.BUCKET, "ckpt"))
    assert only(found, "bucket-public-access-prevention") == [
        f"Bucket 'ckpt' has publicAccessPrevention {shown}; set it to 'enforced' so no IAM grant or ACL "
        "can make the checkpoints public."
    ]


@pytest.mark.parametrize("value", [False, None])
def test_bucket_without_uniform_access_fails(value):
    props = {k: v for k, v in GOOD_BUCKET.items() if k != "uniformBucketLevelAccess"}
    if value is not None:
        props["uniformBucketLevelAccess"] = value
    found = evaluate(P.BUCKET, props, urn(P.BUCKET, "ckpt"))
    assert "uniformBucketLevelAccess" in only(found, "bucket-uniform-access")[0]


# ----------------------------------------------------------------------------- bucket IAM not public

WI_MEMBER = (
    "principal://iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/"
    "my-tpu-project.svc.id.goog/subject/ns/default/sa/ray-tpu-ksa"
)


def test_bucket_grant_to_a_workload_identity_principal_passes():
    props = {"bucket": "ckpt", "role": "roles/storage.objectUser", "member": WI_MEMBER}
    assert evaluate(P.BUCKET_IAM_MEMBER, props, urn(P.BUCKET_IAM_MEMBER, "storage-object-user")) == {}
    binding = {"bucket": "ckpt", "role": "roles/storage.objectViewer", "members": [WI_MEMBER, "group:ml@x.com"]}
    assert evaluate(P.BUCKET_IAM_BINDING, binding, urn(P.BUCKET_IAM_BINDING, "viewers")) == {}


@pytest.mark.parametrize("member", ["allUsers", "allAuthenticatedUsers", "AllUsers", "principalSet://goog/public:all"])
def test_bucket_iam_member_to_the_public_fails(member):
    props = {"bucket": "ckpt", "role": "roles/storage.objectViewer", "member": member}
    found = evaluate(P.BUCKET_IAM_MEMBER, props, urn(P.BUCKET_IAM_MEMBER, "public-read"))
    assert only(found, "bucket-iam-not-public") == [
        f"'public-read' grants roles/storage.objectViewer to {member}; buckets of this stack must not be public."
    ]


def test_bucket_iam_binding_with_a_public_member_fails():
    props = {"bucket": "ckpt", "role": "roles/storage.objectViewer", "members": [WI_MEMBER, "allUsers"]}
    assert run(P.bucket_iam_not_public, P.BUCKET_IAM_BINDING, props, name="b") == [
        "'b' grants roles/storage.objectViewer to allUsers; buckets of this stack must not be public."
    ]


def test_bucket_iam_policy_document_is_inspected():
    public = {"bindings": [{"role": "roles/storage.objectViewer", "members": ["allAuthenticatedUsers"]}]}
    private = {"bindings": [{"role": "roles/storage.objectUser", "members": [WI_MEMBER]}]}
    assert run(P.bucket_iam_not_public, P.BUCKET_IAM_POLICY, {"bucket": "c", "policyData": json.dumps(public)}) == [
        "'res' grants bucket roles to allAuthenticatedUsers; buckets of this stack must not be public."
    ]
    assert run(P.bucket_iam_not_public, P.BUCKET_IAM_POLICY, {"bucket": "c", "policyData": json.dumps(private)}) == []


# ----------------------------------------------------------------------------- storage IAM only on buckets


def test_bucket_scoped_storage_role_and_project_non_storage_role_pass():
    bucket_grant = {"bucket": "ckpt", "role": "roles/storage.objectUser", "member": WI_MEMBER}
    assert run(P.storage_iam_bucket_scoped, P.BUCKET_IAM_MEMBER, bucket_grant) == []
    project_grant = {"project": "p", "role": "roles/container.developer", "member": "serviceAccount:ci@p.iam.gserviceaccount.com"}
    assert evaluate("gcp:projects/iAMMember:IAMMember", project_grant, urn("gcp:projects/iAMMember:IAMMember", "ci")) == {}


@pytest.mark.parametrize(
    "type_,level",
    [
        ("gcp:projects/iAMMember:IAMMember", "projects"),
        ("gcp:folder/iAMMember:IAMMember", "folder"),
        ("gcp:organizations/iAMMember:IAMMember", "organizations"),
    ],
)
def test_storage_role_on_the_resource_hierarchy_fails(type_, level):
    props = {"role": "roles/storage.objectAdmin", "member": WI_MEMBER}
    found = evaluate(type_, props, urn(type_, "ksa-storage"))
    assert only(found, "storage-iam-bucket-scoped") == [
        f"'ksa-storage' grants roles/storage.objectAdmin on the whole {level} level, which reaches every bucket "
        "in it; grant storage roles on the bucket instead (gcp.storage.BucketIAMMember)."
    ]


def test_project_iam_binding_and_policy_with_storage_roles_fail():
    binding = {"project": "p", "role": "roles/storage.admin", "members": [WI_MEMBER]}
    assert len(run(P.storage_iam_bucket_scoped, "gcp:projects/iAMBinding:IAMBinding", binding)) == 1
    document = {
        "bindings": [
            {"role": "roles/viewer", "members": ["group:ml@x.com"]},
            {"role": "roles/storage.objectViewer", "members": [WI_MEMBER]},
        ]
    }
    messages = run(P.storage_iam_bucket_scoped, "gcp:projects/iAMPolicy:IAMPolicy", {"policyData": json.dumps(document)})
    assert len(messages) == 1 and "roles/storage.objectViewer" in messages[0]


def test_reviewed_project_wide_storage_roles_can_be_allowed():
    props = {"project": "p", "role": "roles/storage.objectViewer", "member": WI_MEMBER}
    config = {"allowedRoles": ["roles/storage.objectViewer"]}
    assert run(P.storage_iam_bucket_scoped, "gcp:projects/iAMMember:IAMMember", props, config=config) == []
    props["role"] = "roles/storage.admin"
    assert len(run(P.storage_iam_bucket_scoped, "gcp:projects/iAMMember:IAMMember", props, config=config)) == 1


# ----------------------------------------------------------------------------- Ray dashboard


def service(type_: str, *, selector=None, ports=None, annotations=None) -> dict:
    props = {
        "metadata": {"name": "ray-head-public", "namespace": "default"},
        "spec": {"type": type_, "selector": selector or {}, "ports": ports or [{"port": 80, "targetPort": 8080}]},
    }
    if annotations:
        props["metadata"]["annotations"] = annotations
    return props


HEAD = {"ray.io/cluster": "maxtext-tpu-cluster", "ray.io/node-type": "head"}


def test_cluster_ip_head_service_and_unrelated_load_balancer_pass():
    assert evaluate(P.K8S_SERVICE, service("ClusterIP", selector=HEAD, ports=[{"port": 8265}]), urn(P.K8S_SERVICE, "s")) == {}
    web = service("LoadBalancer", selector={"app": "web"}, ports=[{"port": 443, "targetPort": 8443}])
    assert evaluate(P.K8S_SERVICE, web, urn(P.K8S_SERVICE, "web")) == {}


def test_load_balancer_selecting_the_ray_head_fails():
    props = service("LoadBalancer", selector=HEAD, ports=[{"port": 80, "targetPort": 8080}])
    assert only(evaluate(P.K8S_SERVICE, props, urn(P.K8S_SERVICE, "dash")), "ray-dashboard-not-exposed") == [
        "Service 'dash' of type LoadBalancer exposes the Ray head (selects ray.io/node-type=head). "
        "The dashboard/Jobs API runs arbitrary code: keep it ClusterIP and use kubectl port-forward."
    ]


@pytest.mark.parametrize(
    "ports,reason",
    [
        ([{"port": 8265}], "port 8265"),
        ([{"port": 80, "targetPort": 8265}], "targetPort 8265"),
        ([{"port": 80, "targetPort": "dashboard"}], "targetPort 'dashboard'"),
        ([{"port": 10001, "targetPort": "client"}], "port 10001; targetPort 'client'"),
        ([{"port": 8265.0}], "port 8265"),  # numbers may arrive as floats
    ],
)
def test_node_port_or_load_balancer_on_ray_ports_fails(ports, reason):
    for type_ in ("NodePort", "LoadBalancer"):
        messages = run(P.ray_dashboard_not_exposed, P.K8S_SERVICE, service(type_, selector={"app": "x"}, ports=ports), name="s")
        assert messages == [
            f"Service 's' of type {type_} exposes the Ray head ({reason}). "
            "The dashboard/Jobs API runs arbitrary code: keep it ClusterIP and use kubectl port-forward."
        ]


def test_internal_load_balancer_only_passes_when_allowed():
    props = service("LoadBalancer", selector=HEAD, annotations={"networking.gke.io/load-balancer-type": "Internal"})
    assert len(run(P.ray_dashboard_not_exposed, P.K8S_SERVICE, props)) == 1
    assert run(P.ray_dashboard_not_exposed, P.K8S_SERVICE, props, config={"allowInternalLoadBalancer": True}) == []
    # NodePort opens the port on every node; the internal-LB allowance does not cover it.
    node_port = service("NodePort", selector=HEAD, annotations={"networking.gke.io/load-balancer-type": "Internal"})
    assert len(run(P.ray_dashboard_not_exposed, P.K8S_SERVICE, node_port, config={"allowInternalLoadBalancer": True})) == 1


def ray_cluster(head: dict) -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "maxtext-tpu-cluster", "namespace": "default"},
        "spec": {"authOptions": {"mode": "token"}, "headGroupSpec": {"rayStartParams": {}, **head}, "workerGroupSpecs": []},
    }


RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"


@pytest.mark.parametrize("head", [{"serviceType": "ClusterIP"}, {}])
def test_ray_cluster_with_cluster_ip_head_passes(head):
    assert evaluate(RAY_CLUSTER, ray_cluster(head), urn(RAY_CLUSTER, "ray-raycluster", parents=("gke-ray-tpu:index:RayTpuCluster",))) == {}


@pytest.mark.parametrize("service_type", ["LoadBalancer", "NodePort"])
def test_ray_cluster_publishing_the_head_fails(service_type):
    found = evaluate(RAY_CLUSTER, ray_cluster({"serviceType": service_type}), urn(RAY_CLUSTER, "rc"))
    assert only(found, "ray-dashboard-not-exposed") == [
        f"'rc' sets spec.headGroupSpec.serviceType={service_type}, which publishes the Ray dashboard and "
        "Jobs API; use ClusterIP."
    ]


def test_ray_cluster_head_service_override_fails():
    head = {"serviceType": "ClusterIP", "headService": {"spec": {"type": "LoadBalancer"}}}
    assert run(P.ray_dashboard_not_exposed, RAY_CLUSTER, ray_cluster(head), name="rc") == [
        "'rc' sets spec.headGroupSpec.headService.spec.type=LoadBalancer, which publishes the Ray dashboard "
        "and Jobs API; use ClusterIP."
    ]


def test_ray_job_and_ray_service_embedded_clusters_are_checked():
    job = {"spec": {"rayClusterSpec": {"headGroupSpec": {"serviceType": "LoadBalancer"}}}}
    assert "spec.rayClusterSpec.headGroupSpec.serviceType=LoadBalancer" in run(
        P.ray_dashboard_not_exposed, "kubernetes:ray.io/v1:RayJob", job
    )[0]
    svc = {"spec": {"rayClusterConfig": {"headGroupSpec": {"serviceType": "NodePort"}}}}
    assert "spec.rayClusterConfig.headGroupSpec.serviceType=NodePort" in run(
        P.ray_dashboard_not_exposed, "kubernetes:ray.io/v1:RayService", svc
    )[0]
    assert run(P.ray_dashboard_not_exposed, "kubernetes:ray.io/v1:RayJob", {"spec": {"entrypoint": "python t.py"}}) == []


# ----------------------------------------------------------------------------- Ray token auth


RAY_JOB = "kubernetes:ray.io/v1:RayJob"


@pytest.mark.parametrize("auth", [None, {}, {"mode": "disabled"}])
def test_a_ray_cluster_without_token_auth_fails(auth):
    props = ray_cluster({})
    props["spec"].pop("authOptions")
    if auth is not None:
        props["spec"]["authOptions"] = auth
    assert only(evaluate(RAY_CLUSTER, props, urn(RAY_CLUSTER, "rc")), "ray-token-auth") == [
        "'rc' declares a Ray cluster without token auth (spec.authOptions.mode is not 'token'): any pod that "
        "reaches its ports can run code as its service account. Set spec.authOptions.mode: token "
        "(KubeRay >= 1.5.1, rayVersion >= 2.52.0)."
    ]


def test_the_clusters_ray_jobs_and_ray_services_bring_need_token_auth_too():
    open_job = {"spec": {"entrypoint": "python t.py", "rayClusterSpec": {"headGroupSpec": {}}}}
    assert "spec.rayClusterSpec.authOptions.mode" in run(P.ray_token_auth, RAY_JOB, open_job)[0]
    locked_job = {"spec": {"rayClusterSpec": {"authOptions": {"mode": "token"}, "headGroupSpec": {}}}}
    assert run(P.ray_token_auth, RAY_JOB, locked_job) == []
    # A job on an existing cluster declares no cluster: the RayCluster's own check covers it.
    assert run(P.ray_token_auth, RAY_JOB, {"spec": {"clusterSelector": {"ray.io/cluster": "c"}}}) == []
    svc = {"spec": {"rayClusterConfig": {"headGroupSpec": {}}}}
    assert "spec.rayClusterConfig.authOptions.mode" in run(P.ray_token_auth, "kubernetes:ray.io/v1:RayService", svc)[0]


# ----------------------------------------------------------------------------- NetworkPolicy over Ray pods


def network_policy(selector: dict, namespace: str = "default", types=("Ingress",)) -> dict:
    spec: dict = {"podSelector": selector}
    if types is not None:
        spec["policyTypes"] = list(types)
    return {"metadata": {"name": "p", "namespace": namespace}, "spec": spec}


def labelled_cluster(labels: dict) -> dict:
    props = ray_cluster({"template": {"metadata": {"labels": labels}}})
    props["spec"]["workerGroupSpecs"] = [{"groupName": "tpu-group", "template": {"metadata": {"labels": labels}}}]
    return props


def stack_violations(*resources: tuple[str, dict]) -> list[str]:
    found = evaluate_stack([(type_, props, urn(type_, f"r{i}"), f"r{i}") for i, (type_, props) in enumerate(resources)])
    return found.get(("ray-pods-network-policy", urn(RAY_CLUSTER, "r0")), []) + found.get(
        ("ray-pods-network-policy", urn(RAY_JOB, "r0")), [])


@pytest.mark.parametrize("selector", [
    {"matchLabels": {"stack": "a"}},
    {"matchExpressions": [{"key": "stack", "operator": "In", "values": ["a", "b"]}]},
    {"matchExpressions": [{"key": "stack", "operator": "Exists"}]},
    {"matchLabels": {"ray.io/cluster": "maxtext-tpu-cluster"}},  # KubeRay's own label
    {},  # every pod of the namespace
])
def test_ray_pods_a_namespace_policy_selects_pass(selector):
    cluster = (RAY_CLUSTER, labelled_cluster({"stack": "a"}))
    assert stack_violations(cluster, (P.NETWORK_POLICY, network_policy(selector))) == []


@pytest.mark.parametrize("policy", [
    None,
    network_policy({"matchLabels": {"stack": "b"}}),
    network_policy({"matchLabels": {"stack": "a"}}, namespace="other"),
    network_policy({"matchLabels": {"stack": "a"}}, types=("Egress",)),
    network_policy({"matchExpressions": [{"key": "stack", "operator": "NotIn", "values": ["a"]}]}),
    network_policy({"matchLabels": {"ray.io/node-type": "head"}}),  # the workers stay open
])
def test_ray_pods_no_ingress_policy_of_their_namespace_selects_fail(policy):
    resources = [(RAY_CLUSTER, labelled_cluster({"stack": "a"}))] + ([(P.NETWORK_POLICY, policy)] if policy else [])
    messages = stack_violations(*resources)
    assert messages and all("selected by no ingress NetworkPolicy of namespace 'default'" in m for m in messages)


def test_a_ray_jobs_own_cluster_is_matched_by_its_template_labels_alone():
    job = {"metadata": {"name": "run", "namespace": "default"}, "spec": {"rayClusterSpec": {
        "headGroupSpec": {"template": {"metadata": {"labels": {"stack": "a"}}}}, "workerGroupSpecs": []}}}
    assert stack_violations((RAY_JOB, job), (P.NETWORK_POLICY, network_policy({"matchLabels": {"stack": "a"}}))) == []
    # Its cluster's name is generated: a policy on ray.io/cluster=<job name> does not select it.
    by_name = network_policy({"matchLabels": {"ray.io/cluster": "run"}})
    assert stack_violations((RAY_JOB, job), (P.NETWORK_POLICY, by_name)) != []


# ----------------------------------------------------------------------------- deletion protection


def cluster(deletion_protection=None) -> dict:
    props = {"name": "ray-tpu-multislice", "location": "us-east5-b", "removeDefaultNodePool": True}
    if deletion_protection is not None:
        props["deletionProtection"] = deletion_protection
    return props


@pytest.mark.parametrize("value", [True, None])
def test_prod_cluster_with_deletion_protection_passes(value):
    # None: unset, the provider's default (true) applies.
    assert evaluate(P.CLUSTER, cluster(value), urn(P.CLUSTER, "gke-cluster", "prod")) == {}


@pytest.mark.parametrize("stack", ["prod", "staging", "dev2"])
def test_non_dev_cluster_without_deletion_protection_fails(stack):
    found = evaluate(P.CLUSTER, cluster(False), urn(P.CLUSTER, "gke-cluster", stack))
    assert only(found, "cluster-deletion-protection") == [
        f"Cluster 'gke-cluster' sets deletionProtection=false in stack '{stack}'. Only the stacks in "
        "nonProdStacks may turn it off; set gke-ray-tpu:deletionProtection to true (the default)."
    ]


def test_dev_cluster_may_disable_deletion_protection():
    assert evaluate(P.CLUSTER, cluster(False), urn(P.CLUSTER, "gke-cluster", "dev")) == {}


def test_non_prod_stacks_are_configurable_glob_patterns():
    config = {"nonProdStacks": ["dev-*", "sandbox"]}
    assert run(P.cluster_deletion_protection, P.CLUSTER, cluster(False), stack="dev-alice", config=config) == []
    assert run(P.cluster_deletion_protection, P.CLUSTER, cluster(False), stack="sandbox", config=config) == []
    # Replacing the list drops the default "dev".
    assert len(run(P.cluster_deletion_protection, P.CLUSTER, cluster(False), stack="dev", config=config)) == 1


# ----------------------------------------------------------------------------- preview-time unknowns


def test_unknown_values_propagate_to_the_sdk_instead_of_passing_silently():
    # During preview the SDK wraps props in this proxy; an output-dependent value raises
    # UnknownValueError, which the analyzer reports as "can't run policy during preview".
    props = unknown_checking_proxy({"mtu": UNKNOWN_NUMBER_VALUE, "autoCreateSubnetworks": False})
    with pytest.raises(UnknownValueError):
        run(P.dcn_network_mtu, P.NETWORK, props, parents=(DCN_PARENT,))
    # Known values read through the proxy work as plain dicts do.
    proxied = unknown_checking_proxy(pool("ct6e-standard-4t", False))
    assert len(run(P.tpu_node_pool_gvnic, P.NODE_POOL, proxied)) == 1
    proxied_ok = unknown_checking_proxy(service("LoadBalancer", selector={"app": "web"}, ports=[{"port": 443}]))
    assert run(P.ray_dashboard_not_exposed, P.K8S_SERVICE, proxied_ok) == []


# ----------------------------------------------------------------------------- --policy-pack-config example


def test_example_policy_pack_config_matches_the_schemas():
    example = json.loads((ROOT / "policy" / "config.example.json").read_text())
    by_name = {p.name: p for p in P.POLICIES}
    assert set(example) <= set(by_name)
    for name, settings in example.items():
        properties = dict(by_name[name].config_schema.properties) if by_name[name].config_schema else {}
        properties["enforcementLevel"] = {"enum": ["advisory", "mandatory", "remediate", "disabled"]}
        schema = {"type": "object", "properties": properties, "additionalProperties": False}
        jsonschema.validate(settings, schema)
    # A misspelt key is caught by the same check.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"nonProdStack": ["dev"]},
            {"type": "object", "properties": by_name["cluster-deletion-protection"].config_schema.properties,
             "additionalProperties": False},
        )


def test_example_config_lets_personal_dev_stacks_drop_deletion_protection():
    example = json.loads((ROOT / "policy" / "config.example.json").read_text())
    assert evaluate(P.CLUSTER, cluster(False), urn(P.CLUSTER, "gke-cluster", "dev-alice"), config=example) == {}
    assert list(evaluate(P.CLUSTER, cluster(False), urn(P.CLUSTER, "gke-cluster", "prod"), config=example)) == [
        "cluster-deletion-protection"
    ]
