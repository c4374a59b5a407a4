"""Schema checks for the Kubernetes objects the stack emits.

Core kinds are checked with ``kubernetes-validate`` (the API server's OpenAPI
schemas, strict: unknown fields fail); RayClusters and RayJobs against the
KubeRay CRDs' ``openAPIV3Schema`` vendored in ``tests/crds/kuberay``, and Kueue's
objects against Kueue's CRDs (v0.19.2, version ``v1beta2``) in ``tests/crds/kueue``,
then the CRDs' own CEL rules (``x-kubernetes-validations``, ``tests/crd_rules.py``): what
the API server enforces for the custom resources. :func:`validate_writes` holds a fake's
stored objects to the same, each write as an update of the one before.
"""

from __future__ import annotations

import copy
import json
import re
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

import jsonschema
import kubernetes_validate

from tests import crd_rules

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
    return _python_patterns(crd_rules.crd_schema(_crd_name(path), version))


def _crd_name(path: Path) -> str:
    """A vendored CRD's name as ``tests/crd_rules.py`` reads it: its path under ``tests/crds``."""
    return path.relative_to(crd_rules.CRDS).as_posix()


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


def validate_ray_cluster(manifest: dict, old: Optional[dict] = None) -> None:
    """Raise unless the manifest passes the KubeRay RayCluster CRD (unknown fields refused) and its rules (as an
    update of ``old``, where given)."""
    _validate_custom(manifest, RAYCLUSTER_CRD, "RayCluster", old=old)


def validate_ray_job(manifest: dict, old: Optional[dict] = None) -> None:
    """Raise unless the manifest passes the KubeRay RayJob CRD (unknown fields refused) and its rules (as an
    update of ``old``, where given)."""
    _validate_custom(manifest, RAYJOB_CRD, "RayJob", old=old)


def validate_kueue(manifest: dict, old: Optional[dict] = None) -> None:
    """Raise unless the manifest is a Kueue object of ``kueue.x-k8s.io/v1beta2`` that passes its CRD (unknown
    fields refused) and its rules (as an update of ``old``, where given). v1beta1 is still served by Kueue 0.19 but
    deprecated, so it is refused here."""
    kind = manifest.get("kind")
    if kind not in KUEUE_KINDS:
        raise jsonschema.ValidationError(f"not a Kueue kind with a vendored CRD: {kind!r}")
    if manifest.get("apiVersion") != KUEUE_API_VERSION:
        raise jsonschema.ValidationError(f"{kind} apiVersion {manifest.get('apiVersion')!r}: expected {KUEUE_API_VERSION}")
    _validate_custom(manifest, kueue_crd(kind), kind, "v1beta2", old=old)


def served_kuberay_crds() -> dict:
    """KubeRay's CRDs whole, as a cluster serves them (their specs), in ``MockGke``'s keywords."""
    return {"served_raycluster_crd": json.loads(RAYCLUSTER_CRD.read_text())["spec"],
            "served_rayjob_crd": json.loads(RAYJOB_CRD.read_text())["spec"]}


def kueue_crd(kind: str) -> Path:
    return KUEUE_CRDS / f"kueue.x-k8s.io_{KUEUE_KINDS[kind]}.json"


def validate_custom_object(manifest: dict, old: Optional[dict] = None) -> None:
    """Raise unless a RayCluster, RayJob or Kueue object passes its CRD and its rules (an update of ``old``)."""
    validate = {"RayCluster": validate_ray_cluster, "RayJob": validate_ray_job}.get(manifest.get("kind"), validate_kueue)
    validate(manifest, old)


_WRITTEN: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def validate_writes(store: object, objects: Iterable[dict]) -> None:
    """Hold what a fake has written to its CRDs: each of ``objects`` (the RayJobs or Workloads ``store`` keeps)
    that changed since the last call is validated as the API server would take the write: a create the first
    time, then an update of the version seen before (the rules on ``oldSelf``: immutable fields). A write the CRD
    refuses is the fake's error: an AssertionError naming the object."""
    seen = _WRITTEN.setdefault(store, {})
    for obj in objects:
        key = (obj.get("kind"), (obj.get("metadata") or {}).get("namespace"), obj["metadata"]["name"])
        before = seen.get(key)
        if before == obj:
            continue
        try:
            validate_custom_object(obj, before)
        except jsonschema.ValidationError as e:
            raise AssertionError(f"{type(store).__name__} wrote a {key[0]} {key[2]} its CRD refuses: {e.message}") from None
        seen[key] = copy.deepcopy(obj)


@lru_cache(maxsize=None)
def _validator(path: Path, version: str):
    """A validator of the CRD's schema, checked against its metaschema once (``jsonschema.validate`` checks it on
    every call: most of the time a Workload's validation took)."""
    schema = _crd_schema(path, version)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validate_custom(manifest: dict, crd: Path, kind: str, version: str = "v1", old: Optional[dict] = None) -> None:
    """Beyond the schema's own rules, unknown fields are an error here: the API
    server would silently prune them, so a misspelt field would be lost. Then the CRD's CEL rules."""
    schema = _crd_schema(crd, version)
    error = jsonschema.exceptions.best_match(_validator(crd, version).iter_errors(manifest))
    if error is not None:
        raise error
    unknown = list(_unknown_fields(manifest, schema, "$"))
    if unknown:
        raise jsonschema.ValidationError(f"fields the {kind} CRD does not define: {', '.join(unknown)}")
    refused = crd_rules.violations(manifest, _crd_name(crd), version, old)
    if refused:
        raise Refused(kind, refused)


class Refused(jsonschema.ValidationError):
    """An object the CRD's CEL rules refuse: ``violations`` are the rules, each with where it failed."""

    def __init__(self, kind: str, violations: list):
        self.violations = violations
        super().__init__(f"the {kind} CRD's rules refuse it: "
                         + "; ".join(f"{v} [rule: {v.rule.rule}]" for v in violations))


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
