"""Checks of what the cluster serves, made before a job is submitted to it."""

from __future__ import annotations

from typing import Callable

from core.kuberay import MIN_KUBERAY, MIN_KUBERAY_AUTH, RAYCLUSTER_CRD, supports_flat_resource_claims, supports_token_auth
from training.driver.errors import ClusterError


def check_kuberay(extensions_api, log: Callable[[str], None]) -> None:
    """Refuse a cluster whose KubeRay drops the worker pods' DCN claim (KubeRay < 1.4) or Ray's token auth
    (KubeRay < 1.5.1: its Ray clusters run open, whatever the stack declared).

    ``extensions_api`` is a ``kubernetes.client.ApiextensionsV1Api``. A user
    who may not read CRDs gets a note instead: the check is skipped, not failed.
    """
    from kubernetes.client import ApiClient
    from kubernetes.client.exceptions import ApiException

    try:
        crd = extensions_api.read_custom_resource_definition(RAYCLUSTER_CRD)
    except ApiException as e:
        if e.status in (401, 403):
            log(f"cannot read the {RAYCLUSTER_CRD} CRD ({e.status} {e.reason}): not checked that KubeRay >= {MIN_KUBERAY_AUTH}")
            return
        if e.status == 404:
            raise ClusterError(f"the cluster serves no {RAYCLUSTER_CRD} CRD: is GKE's Ray operator add-on enabled?") from None
        raise ClusterError(f"cannot read the {RAYCLUSTER_CRD} CRD ({e.status} {e.reason})") from None
    crd = ApiClient().sanitize_for_serialization(crd)
    if not supports_flat_resource_claims(crd):
        raise ClusterError(
            f"the cluster's {RAYCLUSTER_CRD} CRD has no resourceClaims[].resourceClaimTemplateName, so its KubeRay is "
            f"older than {MIN_KUBERAY} and the TPU workers got no DCN NICs; upgrade the cluster to a GKE version "
            "whose Ray operator add-on runs KubeRay >= 1.4"
        )
    if not supports_token_auth(crd):
        raise ClusterError(
            f"the cluster's {RAYCLUSTER_CRD} CRD has no authOptions, so its KubeRay is older than {MIN_KUBERAY_AUTH} "
            "and dropped the token auth the stack declares: its Ray clusters accept jobs from any pod. Upgrade the "
            f"cluster to a GKE version whose Ray operator add-on runs KubeRay >= {MIN_KUBERAY_AUTH}"
        )
