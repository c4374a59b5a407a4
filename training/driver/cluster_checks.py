"""Checks of what the cluster serves, made before a job is submitted to it."""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from gke_ray_tpu.core.kuberay import (
    MIN_KUBERAY_AUTH, MIN_KUBERAY_OWN_CLUSTERS, RAYCLUSTER_CRD, RAYJOB_CRD, served_crd_problems, served_rayjob_problems,
)
from gke_ray_tpu.training.driver.errors import ClusterError, api_refusal


def check_kuberay(extensions_api, log: Callable[[str], None], own_clusters: bool = False) -> None:
    """Refuse a cluster whose KubeRay drops the worker pods' DCN claim (KubeRay < 1.4) or Ray's token auth
    (KubeRay < 1.5.1: its Ray clusters run open, whatever the stack declared) and, for a run that brings its own
    cluster (``own_clusters``), its RayJob's ``preRunningDeadlineSeconds`` (KubeRay < 1.6.0: a run without
    capacity would wait for ever): the floor the stack's declared runs are held to as well.

    ``extensions_api`` is a ``kubernetes.client.ApiextensionsV1Api``. A user
    who may not read CRDs gets a note instead: the check is skipped, not failed.
    """
    floor = MIN_KUBERAY_OWN_CLUSTERS if own_clusters else MIN_KUBERAY_AUTH
    problems = []
    for name, rules in ((RAYCLUSTER_CRD, served_crd_problems), (RAYJOB_CRD, served_rayjob_problems)):
        if name == RAYJOB_CRD and not own_clusters:
            continue
        crd = _served(extensions_api, name, floor, log)
        if crd is not None:
            problems += [f"its {name} CRD {problem}" for problem in rules(crd)]
    if problems:
        raise ClusterError(
            "the cluster's KubeRay is too old: " + "; ".join(problems) + ". Upgrade the cluster to a GKE version whose "
            f"Ray operator add-on runs KubeRay >= {floor}"
        )


def _served(extensions_api, name: str, floor: str, log: Callable[[str], None]) -> Optional[Mapping]:
    from kubernetes.client import ApiClient
    from kubernetes.client.exceptions import ApiException

    try:
        crd = extensions_api.read_custom_resource_definition(name)
    except ApiException as e:
        if e.status in (401, 403):
            log(f"cannot read the {name} CRD ({api_refusal(e)}): not checked that KubeRay >= {floor}")
            return None
        if e.status == 404:
            raise ClusterError(f"the cluster serves no {name} CRD: is GKE's Ray operator add-on enabled?") from None
        raise ClusterError(f"cannot read the {name} CRD ({api_refusal(e)})") from None
    return ApiClient().sanitize_for_serialization(crd)
