"""Schema checks for the Kubernetes objects the stack emits.

Core kinds are checked with ``kubernetes-validate`` (the API server's OpenAPI
schemas, strict: unknown fields fail); RayClusters and RayJobs against the
KubeRay CRDs' ``openAPIV3Schema`` vendored in ``tests/crds/kuberay``, which is
what the API server enforces for the custom resources.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate

KUBERNETES_VERSION = "1.35.0"
"""Schemas of the GKE minor the stack pins (1.35)."""
CRDS = Path(__file__).resolve().parent / "crds" / "kuberay"
RAYCLUSTER_CRD = CRDS / "ray.io_rayclusters.json"
RAYJOB_CRD = CRDS / "ray.io_rayjobs.json"


@lru_cache(maxsize=None)
def _crd_schema(path: Path, version: str = "v1") -> dict:
    crd = json.loads(path.read_text())
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return served["schema"]["openAPIV3Schema"]
    raise LookupError(f"{path} has no version {version}")


def validate_ray_cluster(manifest: dict) -> None:
    """Raise unless the manifest passes the KubeRay RayCluster CRD (unknown fields refused)."""
    _validate_custom(manifest, RAYCLUSTER_CRD, "RayCluster")


def validate_ray_job(manifest: dict) -> None:
    """Raise unless the manifest passes the KubeRay RayJob CRD (unknown fields refused)."""
    _validate_custom(manifest, RAYJOB_CRD, "RayJob")


def _validate_custom(manifest: dict, crd: Path, kind: str) -> None:
    """Beyond the schema's own rules, unknown fields are an error here: the API
    server would silently prune them, so a misspelt field would be lost."""
    schema = _crd_schema(crd)
    jsonschema.validate(manifest, schema)
    unknown = list(_unknown_fields(manifest, schema, "$"))
    if unknown:
        raise jsonschema.ValidationError(f"fields the {kind} CRD does not define: {', '.join(unknown)}")


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
