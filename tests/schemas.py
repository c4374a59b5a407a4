"""Schema checks for the Kubernetes objects the stack emits.

Core kinds are checked with ``kubernetes-validate`` (the API server's OpenAPI
schemas, strict: unknown fields fail); RayClusters and RayJobs against the
KubeRay CRDs' ``openAPIV3Schema`` vendored in ``tests/crds/kuberay``, and Kueue's
objects against Kueue's CRDs (v0.19.2, version ``v1beta2``) in ``tests/crds/kueue``:
what the API server enforces for the custom resources, less their CEL rules
(``x-kubernetes-validations``), which jsonschema does not run.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate

KUBERNETES_VERSION = "1.35.0"
"""Schemas of the GKE minor the stack pins (1.35)."""
CRDS = Path(__file__).resolve().parent / "crds" / "kuberay"
RAYCLUSTER_CRD = CRDS / "ray.io_rayclusters.json"
RAYJOB_CRD = CRDS / "ray.io_rayjobs.json"
KUEUE_CRDS = CRDS.parent / "kueue"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
KUEUE_KINDS = {
    "AdmissionCheck": "admissionchecks",
    "ClusterQueue": "clusterqueues",
    "Cohort": "cohorts",
    "LocalQueue": "localqueues",
    "ProvisioningRequestConfig": "provisioningrequestconfigs",
    "ResourceFlavor": "resourceflavors",
    "Workload": "workloads",
}
"""Kueue's kinds whose CRDs are vendored, by the plural the CRD file is named after."""


@lru_cache(maxsize=None)
def _crd_schema(path: Path, version: str = "v1") -> dict:
    crd = json.loads(path.read_text())
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return _python_patterns(served["schema"]["openAPIV3Schema"])
    raise LookupError(f"{path} has no version {version}")


_GO_INLINE_FLAGS = re.compile(r"\^(\(\?[a-zA-Z]+\))")


def _python_patterns(node):
    """The API server matches ``pattern`` with Go's RE2, which takes inline flags anywhere (Kueue's
    AdmissionCheck has ``^(?i)[a-z]...``); Python's ``re`` wants them first, so ``^(?i)`` becomes ``(?i)^``,
    which matches the same strings."""
    if isinstance(node, dict):
        return {key: (_GO_INLINE_FLAGS.sub(r"\1^", value) if key == "pattern" and isinstance(value, str)
                      else _python_patterns(value)) for key, value in node.items()}
    if isinstance(node, list):
        return [_python_patterns(item) for item in node]
    return node


def validate_ray_cluster(manifest: dict) -> None:
    """Raise unless the manifest passes the KubeRay RayCluster CRD (unknown fields refused)."""
    _validate_custom(manifest, RAYCLUSTER_CRD, "RayCluster")


def validate_ray_job(manifest: dict) -> None:
    """Raise unless the manifest passes the KubeRay RayJob CRD (unknown fields refused)."""
    _validate_custom(manifest, RAYJOB_CRD, "RayJob")


def validate_kueue(manifest: dict) -> None:
    """Raise unless the manifest is a Kueue object of ``kueue.x-k8s.io/v1beta2`` that passes its CRD (unknown
    fields refused). v1beta1 is still served by Kueue 0.19 but deprecated, so it is refused here."""
    kind = manifest.get("kind")
    if kind not in KUEUE_KINDS:
        raise jsonschema.ValidationError(f"not a Kueue kind with a vendored CRD: {kind!r}")
    if manifest.get("apiVersion") != KUEUE_API_VERSION:
        raise jsonschema.ValidationError(f"{kind} apiVersion {manifest.get('apiVersion')!r}: expected {KUEUE_API_VERSION}")
    _validate_custom(manifest, KUEUE_CRDS / f"kueue.x-k8s.io_{KUEUE_KINDS[kind]}.json", kind, "v1beta2")


@lru_cache(maxsize=None)
def _validator(path: Path, version: str):
    """A validator of the CRD's schema, checked against its metaschema once (``jsonschema.validate`` checks it on
    every call: most of the time a Workload's validation took)."""
    schema = _crd_schema(path, version)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validate_custom(manifest: dict, crd: Path, kind: str, version: str = "v1") -> None:
    """Beyond the schema's own rules, unknown fields are an error here: the API
    server would silently prune them, so a misspelt field would be lost."""
    schema = _crd_schema(crd, version)
    error = jsonschema.exceptions.best_match(_validator(crd, version).iter_errors(manifest))
    if error is not None:
        raise error
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
