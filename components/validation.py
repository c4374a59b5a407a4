"""Schema checks for the Kubernetes objects the stack emits.

Core kinds are checked with ``kubernetes-validate`` (the API server's OpenAPI
schemas, strict: unknown fields fail); the RayCluster against the KubeRay CRD's
``openAPIV3Schema`` vendored in ``components/schemas/kuberay``, which is what the API
server enforces for the custom resource.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.35.0"
"""Schemas of the GKE minor the stack pins (1.35)."""
RAYCLUSTER_CRD = Path(__file__).resolve().parent / "schemas" / "kuberay" / "ray.io_rayclusters.yaml"


@lru_cache(maxsize=None)
def _crd_schema(path: Path, version: str = "v1") -> dict:
    crd = yaml.safe_load(path.read_text())
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return served["schema"]["openAPIV3Schema"]
    raise LookupError(f"{path} has no version {version}")


def validate_ray_cluster(manifest: dict) -> None:
    """Raise unless the manifest passes the KubeRay RayCluster CRD.

    Beyond the schema's own rules, unknown fields are an error here: the API
    server would silently prune them, so a misspelt field would be lost.
    """
    schema = _crd_schema(RAYCLUSTER_CRD)
    jsonschema.validate(manifest, schema)
    unknown = list(_unknown_fields(manifest, schema, "$"))
    if unknown:
        raise jsonschema.ValidationError(f"fields the RayCluster CRD does not define: {', '.join(unknown)}")


def _unknown_fields(value: object, schema: dict, path: str):
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                yield from _unknown_fields(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from _unknown_fields(item, extra, f"{path}.{key}")
            elif properties is not None:
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _unknown_fields(item, schema["items"], f"{path}[{index}]")


def validate_core(manifest: dict) -> None:
    """Raise ``kubernetes_validate.ValidationError`` unless the object passes the strict core schema."""
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
