"""Checks of what the cluster serves, made before a job is submitted to it."""

from __future__ import annotations

from typing import Callable

from core.kuberay import MIN_KUBERAY, RAYCLUSTER_CRD, supports_flat_resource_claims
from training.driver.errors import ClusterError


def check_kuberay(extensions_api, log: Callable[[str], None]) -> None:
    """Refuse a cluster whose KubeRay drops the worker pods' DCN claim (KubeRay < 1.4).

    ``extensions_api`` is a ``kubernetes.client.ApiextensionsV1Api``. A user
    who may not read CRDs gets a note instead: the check is skipped, not failed.
    """
    from kubernetes.client import ApiClient
    from kubernetes.client.exceptions import ApiException

    try:
        crd = extensions_api.read_custom_resource_definition(RAYCLUSTER_CRD)
    except ApiException as e:
        if e.status in (401, 403):
            log(f"cannot read the {RAYCLUSTER_CRD} CRD ({e.status} {e.reason}): not checked that KubeRay >= {MIN_KUBERAY}")
            return
        if e.status == 404:
            raise ClusterError(f"the cluster serves no {RAYCLUSTER_CRD} CRD: is GKE's Ray operator add-on enabled?") from None
        raise ClusterError(f"cannot read the {RAYCLUSTER_CRD} CRD ({e.status} {e.reason})") from None
    if not supports_flat_resource_claims(ApiClient().sanitize_for_serialization(crd)):
        raise ClusterError(
            f"the cluster's {RAYCLUSTER_CRD} CRD has no resourceClaims[].resourceClaimTemplateName, so its KubeRay is "
            f"older than {MIN_KUBERAY} and the TPU workers got no DCN NICs; upgrade the cluster to a GKE version "
            "whose Ray operator add-on runs KubeRay >= 1.4"
        )
