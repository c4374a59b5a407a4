"""Checks of what the cluster serves, made before a job is submitted to it."""

from __future__ import annotations

from typing import Callable

from gke_ray_tpu.core.kuberay import MIN_KUBERAY_AUTH, RAYCLUSTER_CRD, served_crd_problems
from gke_ray_tpu.training.driver.errors import ClusterError


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
    problems = served_crd_problems(ApiClient().sanitize_for_serialization(crd))
    if problems:
        raise ClusterError(
            f"the cluster's {RAYCLUSTER_CRD} CRD " + "; it ".join(problems) + ". Upgrade the cluster to a GKE "
            f"version whose Ray operator add-on runs KubeRay >= {MIN_KUBERAY_AUTH}"
        )
