"""Human-readable views of an offline run: the resource tree and the Kubernetes manifests."""

from __future__ import annotations

import yaml

from gke_ray_tpu.stack.mock_engine import OfflineRun, RegisteredResource

KUBERNETES_PREFIX = "kubernetes:"
# Inputs worth a glance per resource in the tree; the full inputs are in `--json`.
SUMMARY_KEYS = (
    "name",
    "location",
    "region",
    "machineType",
    "nodeCount",
    "mtu",
    "ipCidrRange",
    "sourceRanges",
    "minMasterVersion",
    "role",
    "member",
)


def _summary(resource: RegisteredResource) -> str:
    inputs = with_integers(dict(resource.inputs))
    inputs.update({k: v for k, v in (inputs.get("nodeConfig") or {}).items() if k == "machineType"})
    metadata = inputs.get("metadata") or {}
    if "name" in metadata:
        inputs.setdefault("name", metadata["name"])
    parts = [f"{key}={inputs[key]}" for key in SUMMARY_KEYS if key in inputs]
    if resource.retain_on_delete:
        parts.append("[kept on destroy]")
    return "  ".join(parts)


def render_tree(run: OfflineRun, title: str) -> str:
    """The resources as `pulumi up` would create them, nested under their components."""
    children: dict[str, list[RegisteredResource]] = {}
    for resource in run.resources:
        children.setdefault(resource.parent, []).append(resource)
    roots = [r for r in run.resources if r.parent_type == "pulumi:pulumi:Stack"]
    custom = sum(1 for r in run.resources if r.custom)
    lines = [f"{title}: {custom} resources in {len(roots)} components"]

    def walk(nodes: list[RegisteredResource], indent: str) -> None:
        for position, node in enumerate(nodes):
            last = position == len(nodes) - 1
            summary = _summary(node)
            lines.append(f"{indent}{'└─ ' if last else '├─ '}{node.type}  {node.name}" + (f"  ({summary})" if summary else ""))
            walk(children.get(node.urn, []), indent + ("   " if last else "│  "))

    walk(roots, "")
    return "\n".join(lines)


def kubernetes_manifests(run: OfflineRun) -> list[dict]:
    """The Kubernetes objects the stack applies, in registration order."""
    return [
        r.inputs
        for r in run.resources
        if r.custom and r.type.startswith(KUBERNETES_PREFIX) and "apiVersion" in r.inputs
    ]


def manifests_yaml(run: OfflineRun) -> str:
    head = ("apiVersion", "kind", "metadata")
    documents = [
        {**{k: m[k] for k in head if k in m}, **{k: v for k, v in m.items() if k not in head}}
        for m in map(with_integers, kubernetes_manifests(run))
    ]
    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False)


def with_integers(value):
    """The engine's wire format turns every number into a float; show 2 as 2, not 2.0."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: with_integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_integers(v) for v in value]
    return value
