"""CrossGuard policies that protect the gke-ray-tpu stack.

This module only *defines* the policies; ``policy/__main__.py`` hands them to
``PolicyPack``, whose constructor starts the analyzer's gRPC server and never
returns. Keeping the two apart lets the tests import and call every validator
directly.

Conventions every validator follows:

* ``args.props`` holds the resource's inputs as the engine sees them: the
  provider's camelCase property names (``nodeConfig.gvnic.enabled``,
  ``uniformBucketLevelAccess``), not the Python SDK's snake_case ones. The type
  tokens are the engine's (``gcp:projects/iAMMember:IAMMember``). The tests
  check these names against resources built with the installed SDKs.
* A property left unset is judged by the provider's default: ``mtu`` (1460),
  ``autoCreateSubnetworks`` (true), ``uniformBucketLevelAccess`` (false),
  ``publicAccessPrevention`` ("inherited") and ``gvnic`` (off) fail, and
  ``deletionProtection`` (true) passes.
* During ``pulumi preview`` a value that depends on another resource's output
  is unknown. Reading it raises ``UnknownValueError``, which the SDK turns
  into an advisory "can't run policy during preview" note; the check runs
  again with real values at ``pulumi up``. Validators never catch it.
* Config values come from ``--policy-pack-config`` (JSON). Missing keys fall
  back to the defaults in the schemas below, so the pack behaves the same
  whether or not the engine fills in schema defaults.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from typing import Any, Iterable, Iterator, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
    Severity,
)

PACK_NAME = "gke-ray-tpu-guardrails"

# --- engine type tokens (verified against pulumi-gcp 10.2.0 / pulumi-kubernetes 4.34.2) ---
NETWORK = "gcp:compute/network:Network"
NODE_POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
BUCKET_IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
BUCKET_IAM_POLICY = "gcp:storage/bucketIAMPolicy:BucketIAMPolicy"
# Resource-hierarchy IAM (project, folder, organization): a storage role granted here reaches every bucket below.
HIERARCHY_IAM_MEMBER = (
    "gcp:projects/iAMMember:IAMMember",
    "gcp:folder/iAMMember:IAMMember",
    "gcp:organizations/iAMMember:IAMMember",
)
HIERARCHY_IAM_BINDING = (
    "gcp:projects/iAMBinding:IAMBinding",
    "gcp:folder/iAMBinding:IAMBinding",
    "gcp:organizations/iAMBinding:IAMBinding",
)
HIERARCHY_IAM_POLICY = (
    "gcp:projects/iAMPolicy:IAMPolicy",
    "gcp:folder/iAMPolicy:IAMPolicy",
    "gcp:organizations/iAMPolicy:IAMPolicy",
)
K8S_SERVICE = "kubernetes:core/v1:Service"
# apiextensions.CustomResource registers as ``kubernetes:<apiVersion>:<kind>``.
RAY_CLUSTER_TYPES = ("kubernetes:ray.io/v1:RayCluster", "kubernetes:ray.io/v1alpha1:RayCluster")
RAY_JOB_TYPES = ("kubernetes:ray.io/v1:RayJob", "kubernetes:ray.io/v1alpha1:RayJob")
RAY_SERVICE_TYPES = ("kubernetes:ray.io/v1:RayService", "kubernetes:ray.io/v1alpha1:RayService")

# --- defaults (each one is overridable through the policy's config) ---
DCN_MTU = 8896
DCN_COMPONENT_TYPES = ["gke-ray-tpu:index:DcnNetworks"]
TPU_MACHINE_TYPE_PREFIXES = ["ct4p-", "ct5lp-", "ct5p-", "ct6e-", "tpu7x-"]
PUBLIC_PRINCIPALS = ["allUsers", "allAuthenticatedUsers", "principalSet://goog/public:all"]
RAY_HEAD_PORTS = [6379, 8265, 10001, 52365]
"""Ports where Ray runs code it is sent: GCS (a driver can connect), dashboard + Jobs REST API, Ray client,
and the dashboard agent every Ray pod runs, which accepts job submissions too."""
RAY_HEAD_PORT_NAMES = ["gcs-server", "dashboard", "client"]  # KubeRay's names for the head's ports
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
EXPOSING_SERVICE_TYPES = ("LoadBalancer", "NodePort")
NON_PROD_STACKS = ["dev"]
INTERNAL_LB_ANNOTATIONS = {
    "networking.gke.io/load-balancer-type": "internal",
    "cloud.google.com/load-balancer-type": "internal",
}


# ----------------------------------------------------------------------------- helpers


def _get(value: Any, *path: str) -> Any:
    """``value[path[0]][path[1]]...`` or None as soon as a step is missing or not a mapping."""
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _items(value: Any) -> list:
    """A list (or the SDK's list proxy) as a list; anything else as []."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    return []


def _config(args: ResourceValidationArgs, key: str, default: Any) -> Any:
    value = (args.get_config() or {}).get(key)
    return default if value is None else value


def parse_urn(urn: str) -> tuple[str, str, list[str], str]:
    """``urn:pulumi:<stack>::<project>::<parent types$...$type>::<name>`` -> (stack, project, type chain, name).

    The engine puts the full chain of ancestor component types into a child's
    URN, e.g. ``gke-ray-tpu:index:DcnNetworks$gcp:compute/network:Network``.
    """
    if not urn.startswith("urn:pulumi:"):
        raise ValueError(f"not a Pulumi URN: {urn!r}")
    stack, project, qualified_type, name = urn[len("urn:pulumi:"):].split("::", 3)
    return stack, project, qualified_type.split("$"), name


def stack_name(args: ResourceValidationArgs) -> str:
    """The stack being previewed or updated.

    Read from the resource's URN, which the engine builds as
    ``urn:pulumi:<stack>::<project>::...`` for every resource it analyzes, in
    ``pulumi preview`` and ``pulumi up`` alike, on every backend. The
    alternatives are weaker: ``args.stack_tags`` holds Pulumi Cloud stack tags
    (not the name, and empty on DIY backends), and ``pulumi.get_stack()`` only
    works when the CLI passes ``PULUMI_STACK`` to the analyzer process.
    """
    return parse_urn(args.urn)[0]


def _ancestor_types(urn: str) -> list[str]:
    return parse_urn(urn)[2][:-1]


def _matches_any(value: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns)


_JSON_TYPES = {bool: "boolean", int: "integer", str: "string"}


def _option(default: Any, description: str, item: type = str) -> dict:
    """One ``--policy-pack-config`` key's schema; its JSON type follows ``default`` (lists hold ``item``)."""
    if isinstance(default, list):
        return {"type": "array", "items": {"type": _JSON_TYPES[item]}, "default": default, "description": description}
    return {"type": _JSON_TYPES[type(default)], "default": default, "description": description}


def _rule(name: str, description: str, validate, severity: Severity, options: Optional[dict] = None,
          remediation: Optional[str] = None) -> ResourceValidationPolicy:
    """A mandatory rule of this pack: every rule protects something a reviewer must not wave through."""
    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        severity=severity,
        config_schema=PolicyConfigSchema(properties=dict(options)) if options else None,
        remediation_steps=remediation,
    )


# ----------------------------------------------------------------------------- DCN networks


def is_dcn_network(args: ResourceValidationArgs) -> bool:
    """A network created by a DcnNetworks component, or one named like a DCN network in config."""
    if args.resource_type != NETWORK:
        return False
    parents = _config(args, "dcnComponentTypes", DCN_COMPONENT_TYPES)
    if any(parent in parents for parent in _ancestor_types(args.urn)):
        return True
    patterns = _config(args, "dcnNetworkNamePatterns", [])
    if not patterns:
        return False
    gcp_name = args.props.get("name")
    names = [args.name] + ([gcp_name] if isinstance(gcp_name, str) else [])
    return any(_matches_any(n, patterns) for n in names)


_DCN_SELECTOR_SCHEMA = {
    "dcnComponentTypes": _option(
        DCN_COMPONENT_TYPES, "Component types whose child networks are DCN networks (matched in the URN's type chain)."
    ),
    "dcnNetworkNamePatterns": _option(
        [], "Extra glob patterns (logical or GCP network name), e.g. '*-net-*', for DCN networks "
        "created outside the component.",
    ),
}


def validate_dcn_network_mtu(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if not is_dcn_network(args):
        return
    required = int(_config(args, "mtu", DCN_MTU))
    mtu = args.props.get("mtu")
    if mtu is None:
        report_violation(
            f"DCN network '{args.name}' sets no MTU, so GCP uses 1460; set mtu={required} (jumbo frames for "
            "cross-slice traffic).",
            None,
        )
    elif int(mtu) != required:
        report_violation(f"DCN network '{args.name}' has mtu={int(mtu)}; DCN networks need mtu={required}.", None)


def validate_dcn_network_custom_subnets(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if not is_dcn_network(args):
        return
    if args.props.get("autoCreateSubnetworks") is not False:
        report_violation(
            f"DCN network '{args.name}' is in auto subnet mode (autoCreateSubnetworks is unset or true). "
            "Auto-mode networks all get the same 10.128.0.0/9 ranges, so a node's extra NICs would overlap; "
            "set autoCreateSubnetworks=false and give each network its own subnet.",
            None,
        )


dcn_network_mtu = _rule(
    "dcn-network-mtu",
    "TPU DCN networks must use the jumbo MTU (8896) that multislice traffic is tuned for.",
    validate_dcn_network_mtu,
    Severity.HIGH,
    {"mtu": _option(DCN_MTU, "Required MTU of DCN networks."), **_DCN_SELECTOR_SCHEMA},
    remediation="Create DCN networks with DcnNetworks (mtu defaults to 8896) or pass mtu=8896 to "
    "gcp.compute.Network.",
)

dcn_network_custom_subnets = _rule(
    "dcn-network-custom-subnets",
    "TPU DCN networks must be custom-mode VPCs (autoCreateSubnetworks=false).",
    validate_dcn_network_custom_subnets,
    Severity.MEDIUM,
    _DCN_SELECTOR_SCHEMA,
)


# ----------------------------------------------------------------------------- gVNIC on TPU node pools


def _node_configs(args: ResourceValidationArgs) -> Iterator[tuple[str, Any]]:
    """(where, nodeConfig) for a NodePool, or for a Cluster's default and inline node pools."""
    if args.resource_type == NODE_POOL:
        yield f"node pool '{args.name}'", args.props.get("nodeConfig")
    elif args.resource_type == CLUSTER:
        if args.props.get("nodeConfig") is not None:
            yield f"cluster '{args.name}' default node pool", args.props.get("nodeConfig")
        for index, pool in enumerate(_items(args.props.get("nodePools"))):
            label = _get(pool, "name") or f"#{index}"
            yield f"cluster '{args.name}' inline node pool '{label}'", _get(pool, "nodeConfig")


def validate_tpu_gvnic(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    prefixes = _config(args, "tpuMachineTypePrefixes", TPU_MACHINE_TYPE_PREFIXES)
    for where, node_config in _node_configs(args):
        machine_type = _get(node_config, "machineType")
        if not isinstance(machine_type, str) or not machine_type.startswith(tuple(prefixes)):
            continue
        if _get(node_config, "gvnic", "enabled") is not True:
            report_violation(
                f"{where} runs TPU machine type {machine_type} without gVNIC; set "
                "nodeConfig.gvnic.enabled=true (multi-network DCN NICs require gVNIC).",
                None,
            )


tpu_node_pool_gvnic = _rule(
    "tpu-node-pool-gvnic",
    "TPU node pools must enable gVNIC (nodeConfig.gvnic.enabled).",
    validate_tpu_gvnic,
    Severity.HIGH,
    {"tpuMachineTypePrefixes": _option(
        TPU_MACHINE_TYPE_PREFIXES, "Machine-type prefixes that mark a node pool as a TPU pool."
    )},
)


# ----------------------------------------------------------------------------- buckets


def validate_bucket_public_access_prevention(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != BUCKET:
        return
    value = args.props.get("publicAccessPrevention")
    if value != "enforced":
        shown = "unset (GCP default 'inherited')" if value is None else f"'{value}'"
        report_violation(
            f"Bucket '{args.name}' has publicAccessPrevention {shown}; set it to 'enforced' so no IAM "
            "grant or ACL can make the checkpoints public.",
            None,
        )


def validate_bucket_uniform_access(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != BUCKET:
        return
    if args.props.get("uniformBucketLevelAccess") is not True:
        report_violation(
            f"Bucket '{args.name}' does not enable uniformBucketLevelAccess; enable it so access is "
            "governed by IAM only (no per-object ACLs).",
            None,
        )


def _policy_data_bindings(policy_data: Any) -> list:
    """The ``bindings`` of an IAM policy JSON string (``policyData``); [] when it is not JSON."""
    if not isinstance(policy_data, str):
        return []
    try:
        document = json.loads(policy_data)
    except ValueError:
        return []
    return _items(_get(document, "bindings"))


def _public(member: Any, principals: Iterable[str]) -> bool:
    lowered = {p.lower() for p in principals}
    return isinstance(member, str) and member.strip().lower() in lowered


def validate_bucket_iam_not_public(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    principals = _config(args, "publicPrincipals", PUBLIC_PRINCIPALS)
    if args.resource_type == BUCKET_IAM_MEMBER:
        members = [args.props.get("member")]
    elif args.resource_type == BUCKET_IAM_BINDING:
        members = _items(args.props.get("members"))
    elif args.resource_type == BUCKET_IAM_POLICY:
        members = [m for b in _policy_data_bindings(args.props.get("policyData")) for m in _items(_get(b, "members"))]
    else:
        return
    public = sorted({m for m in members if _public(m, principals)})
    if public:
        report_violation(
            f"'{args.name}' grants {args.props.get('role') or 'bucket roles'} to {', '.join(public)}; "
            "buckets of this stack must not be public.",
            None,
        )


bucket_public_access_prevention = _rule(
    "bucket-public-access-prevention",
    "Storage buckets must set publicAccessPrevention='enforced'.",
    validate_bucket_public_access_prevention,
    Severity.CRITICAL,
)

bucket_uniform_access = _rule(
    "bucket-uniform-access",
    "Storage buckets must enable uniform bucket-level access.",
    validate_bucket_uniform_access,
    Severity.HIGH,
)

bucket_iam_not_public = _rule(
    "bucket-iam-not-public",
    "Bucket IAM must not grant anything to allUsers or allAuthenticatedUsers.",
    validate_bucket_iam_not_public,
    Severity.CRITICAL,
    {"publicPrincipals": _option(
        PUBLIC_PRINCIPALS, "Principals that make a grant public (compared case-insensitively)."
    )},
)


# ----------------------------------------------------------------------------- bucket-scoped storage IAM


def _storage_role(role: Any, allowed: Iterable[str]) -> bool:
    return isinstance(role, str) and role.startswith("roles/storage.") and role not in set(allowed)


def validate_storage_iam_bucket_scoped(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    allowed = _config(args, "allowedRoles", [])
    if args.resource_type in HIERARCHY_IAM_MEMBER or args.resource_type in HIERARCHY_IAM_BINDING:
        roles = [args.props.get("role")]
    elif args.resource_type in HIERARCHY_IAM_POLICY:
        roles = [_get(b, "role") for b in _policy_data_bindings(args.props.get("policyData"))]
    else:
        return
    level = args.resource_type.split(":")[1].split("/")[0]  # projects | folder | organizations
    for role in sorted({r for r in roles if _storage_role(r, allowed)}):
        report_violation(
            f"'{args.name}' grants {role} on the whole {level} level, which reaches every bucket in it; "
            "grant storage roles on the bucket instead (gcp.storage.BucketIAMMember).",
            None,
        )


storage_iam_bucket_scoped = _rule(
    "storage-iam-bucket-scoped",
    "Storage roles (roles/storage.*) may only be granted on buckets, not on projects, folders or organizations.",
    validate_storage_iam_bucket_scoped,
    Severity.HIGH,
    {"allowedRoles": _option(
        [], "roles/storage.* roles that may still be granted project-wide (reviewed exceptions)."
    )},
)


# ----------------------------------------------------------------------------- Ray dashboard / Jobs API


def _internal_lb(metadata: Any) -> bool:
    annotations = _get(metadata, "annotations")
    if not isinstance(annotations, Mapping):
        return False
    return any(
        isinstance(annotations.get(key), str) and annotations.get(key).lower() == value
        for key, value in INTERNAL_LB_ANNOTATIONS.items()
    )


def _service_exposes_ray(service_spec: Any, ports: set, port_names: set) -> list[str]:
    """Why a Service spec reaches the Ray head (empty when it does not)."""
    reasons = []
    selector = _get(service_spec, "selector")
    if isinstance(selector, Mapping) and selector.get("ray.io/node-type") == "head":
        reasons.append("selects ray.io/node-type=head")
    for port in _items(_get(service_spec, "ports")):
        for field in ("port", "targetPort"):
            value = _get(port, field)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and int(value) in ports:
                reasons.append(f"{field} {int(value)}")
            elif isinstance(value, str) and (value in port_names or (value.isdigit() and int(value) in ports)):
                reasons.append(f"{field} '{value}'")
    return reasons


def _ray_head_group_specs(args: ResourceValidationArgs) -> Iterator[tuple[str, Any]]:
    spec = args.props.get("spec")
    if args.resource_type in RAY_CLUSTER_TYPES:
        yield "spec.headGroupSpec", _get(spec, "headGroupSpec")
    elif args.resource_type in RAY_JOB_TYPES:
        yield "spec.rayClusterSpec.headGroupSpec", _get(spec, "rayClusterSpec", "headGroupSpec")
    elif args.resource_type in RAY_SERVICE_TYPES:
        yield "spec.rayClusterConfig.headGroupSpec", _get(spec, "rayClusterConfig", "headGroupSpec")


def validate_ray_dashboard_not_exposed(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    allow_internal = bool(_config(args, "allowInternalLoadBalancer", False))
    ports = {int(p) for p in _config(args, "rayPorts", RAY_HEAD_PORTS)}
    port_names = set(_config(args, "rayPortNames", RAY_HEAD_PORT_NAMES))

    if args.resource_type == K8S_SERVICE:
        spec = args.props.get("spec")
        service_type = _get(spec, "type")
        if service_type not in EXPOSING_SERVICE_TYPES:
            return
        if service_type == "LoadBalancer" and allow_internal and _internal_lb(args.props.get("metadata")):
            return
        reasons = _service_exposes_ray(spec, ports, port_names)
        if reasons:
            report_violation(
                f"Service '{args.name}' of type {service_type} exposes the Ray head ({'; '.join(reasons)}). "
                "The dashboard/Jobs API runs arbitrary code: keep it ClusterIP and use kubectl port-forward.",
                None,
            )
        return

    for path, head in _ray_head_group_specs(args):
        service_type = _get(head, "serviceType")
        if service_type in EXPOSING_SERVICE_TYPES:
            report_violation(
                f"'{args.name}' sets {path}.serviceType={service_type}, which publishes the Ray dashboard "
                "and Jobs API; use ClusterIP.",
                None,
            )
        head_service = _get(head, "headService")
        head_service_type = _get(head_service, "spec", "type")
        if head_service_type in EXPOSING_SERVICE_TYPES and not (
            head_service_type == "LoadBalancer" and allow_internal and _internal_lb(_get(head_service, "metadata"))
        ):
            report_violation(
                f"'{args.name}' sets {path}.headService.spec.type={head_service_type}, which publishes the Ray "
                "dashboard and Jobs API; use ClusterIP.",
                None,
            )


ray_dashboard_not_exposed = _rule(
    "ray-dashboard-not-exposed",
    "Ray's code-running ports (GCS 6379, dashboard / Jobs API 8265, client 10001, dashboard agent 52365) must "
    "not be exposed through a LoadBalancer or NodePort Service.",
    validate_ray_dashboard_not_exposed,
    Severity.CRITICAL,
    {
        "allowInternalLoadBalancer": _option(
            False, "Accept a LoadBalancer annotated as GKE internal (VPC-only) load balancer."
        ),
        "rayPorts": _option(RAY_HEAD_PORTS, "Service ports that reach a port where Ray runs code it is sent.", int),
        "rayPortNames": _option(
            RAY_HEAD_PORT_NAMES, "Service port names that reach a port where Ray runs code it is sent."
        ),
    },
)


def _ray_cluster_specs(resource_type: str, props: Any) -> Iterator[tuple[str, Any]]:
    """``(path, RayCluster spec)`` of every Ray cluster a resource declares (none for a RayJob that selects an
    existing cluster)."""
    spec = _get(props, "spec")
    if resource_type in RAY_CLUSTER_TYPES:
        yield "spec", spec
    elif resource_type in RAY_JOB_TYPES and _get(spec, "rayClusterSpec") is not None:
        yield "spec.rayClusterSpec", _get(spec, "rayClusterSpec")
    elif resource_type in RAY_SERVICE_TYPES:
        yield "spec.rayClusterConfig", _get(spec, "rayClusterConfig")


def validate_ray_token_auth(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    for path, cluster in _ray_cluster_specs(args.resource_type, args.props):
        if _get(cluster, "authOptions", "mode") != "token":
            report_violation(
                f"'{args.name}' declares a Ray cluster without token auth ({path}.authOptions.mode is not "
                "'token'): any pod that reaches its ports can run code as its service account. Set "
                f"{path}.authOptions.mode: token (KubeRay >= 1.5.1, rayVersion >= 2.52.0).",
                None,
            )


ray_token_auth = _rule(
    "ray-token-auth",
    "Every RayCluster, and every Ray cluster a RayJob or RayService brings, runs with Ray's token auth.",
    validate_ray_token_auth,
    Severity.CRITICAL,
)


def _ray_pod_templates(resource_type: str, props: Any) -> Iterator[tuple[str, dict]]:
    """``(where, labels)`` of every Ray pod a resource declares: its template's labels and those KubeRay adds."""
    name = _get(props, "metadata", "name")
    for path, cluster in _ray_cluster_specs(resource_type, props):
        own = {"ray.io/cluster": name} if resource_type in RAY_CLUSTER_TYPES and isinstance(name, str) else {}
        head = _get(cluster, "headGroupSpec", "template")
        groups = [(f"{path}.headGroupSpec", head, {"ray.io/node-type": "head", "ray.io/group": "headgroup"})]
        for index, group in enumerate(_items(_get(cluster, "workerGroupSpecs"))):
            groups.append((f"{path}.workerGroupSpecs[{index}]", _get(group, "template"),
                           {"ray.io/node-type": "worker", "ray.io/group": _get(group, "groupName")}))
        for where, template, kuberay in groups:
            labels = _get(template, "metadata", "labels")
            yield where, {**own, **kuberay, **(dict(labels) if isinstance(labels, Mapping) else {})}


def _selects(selector: Any, labels: Mapping[str, Any]) -> bool:
    """Whether a Kubernetes label selector matches ``labels`` (an empty selector matches every pod)."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels")
    if isinstance(match_labels, Mapping) and any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expression in _items(selector.get("matchExpressions")):
        key, operator, values = _get(expression, "key"), _get(expression, "operator"), _items(_get(expression, "values"))
        present = key in labels
        if not {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(operator, False):
            return False
    return True


def _guards_ingress(policy: Any) -> bool:
    spec = _get(policy, "spec")
    types = _items(_get(spec, "policyTypes"))
    return "Ingress" in types if types else True  # unset: Ingress (plus Egress when egress rules exist)


def validate_ray_pods_network_policy(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    policies = [r.props for r in args.resources if r.resource_type == NETWORK_POLICY and _guards_ingress(r.props)]
    for resource in args.resources:
        namespace = _get(resource.props, "metadata", "namespace") or "default"
        guards = [p for p in policies if (_get(p, "metadata", "namespace") or "default") == namespace]
        for where, labels in _ray_pod_templates(resource.resource_type, resource.props):
            if not any(_selects(_get(p, "spec", "podSelector"), labels) for p in guards):
                report_violation(
                    f"the Ray pods of '{resource.name}' ({where}) are selected by no ingress NetworkPolicy of "
                    f"namespace '{namespace}': every pod of the cluster can reach their ports. Select them with "
                    "one (RayTpuCluster creates it; Dataplane V2 enforces it).",
                    resource.urn,
                )


ray_pods_network_policy = StackValidationPolicy(
    name="ray-pods-network-policy",
    description="Every Ray pod the stack declares is selected by an ingress NetworkPolicy of its namespace.",
    validate=validate_ray_pods_network_policy,
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)


# ----------------------------------------------------------------------------- deletion protection


def validate_cluster_deletion_protection(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != CLUSTER:
        return
    stack = stack_name(args)
    if _matches_any(stack, _config(args, "nonProdStacks", NON_PROD_STACKS)):
        return
    # Unset means the provider default, true; only an explicit false is a violation.
    if args.props.get("deletionProtection") is False:
        report_violation(
            f"Cluster '{args.name}' sets deletionProtection=false in stack '{stack}'. Only the stacks in "
            "nonProdStacks may turn it off; set gke-ray-tpu:deletionProtection to true (the default).",
            None,
        )


cluster_deletion_protection = _rule(
    "cluster-deletion-protection",
    "GKE clusters keep deletionProtection outside dev stacks.",
    validate_cluster_deletion_protection,
    Severity.HIGH,
    {"nonProdStacks": _option(
        NON_PROD_STACKS, "Stack names (glob patterns, e.g. 'dev-*') that may disable deletion protection."
    )},
)


POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    dcn_network_mtu,
    dcn_network_custom_subnets,
    tpu_node_pool_gvnic,
    bucket_public_access_prevention,
    bucket_uniform_access,
    bucket_iam_not_public,
    storage_iam_bucket_scoped,
    ray_dashboard_not_exposed,
    ray_token_auth,
    ray_pods_network_policy,
    cluster_deletion_protection,
]

