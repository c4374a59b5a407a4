"""What this stack needs of the KubeRay the GKE Ray operator add-on runs.

The worker pods claim their DCN NICs with a pod-level
``resourceClaims[].resourceClaimTemplateName``. The RayCluster CRD has that
flat field from KubeRay 1.4 on (built against Kubernetes >= 1.31's PodSpec);
KubeRay 1.2 and 1.3 only know ``resourceClaims[].source.resourceClaimTemplateName``,
and the API server silently prunes fields a CRD does not define, so on those
versions the pods would start without their NICs. KubeRay 1.4 is also where
RayCluster names are checked (DNS-1035, 53 characters). The CRD a cluster
serves says which it is; :func:`supports_flat_resource_claims` reads it.
"""

from __future__ import annotations

from typing import Mapping

MIN_KUBERAY = "1.4.0"
RAYCLUSTER_CRD = "rayclusters.ray.io"


def supports_flat_resource_claims(crd: Mapping) -> bool:
    """Whether a RayCluster CRD (as the API server serves it) keeps a worker pod's resourceClaimTemplateName."""
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") != "v1":
            continue
        node = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        for step in ("spec", "workerGroupSpecs", "template", "spec", "resourceClaims"):
            node = (node.get("properties") or {}).get(step) or {}
            node = node.get("items", node)
        return "resourceClaimTemplateName" in (node.get("properties") or {})
    return False
