"""What this stack needs of the KubeRay the GKE Ray operator add-on runs.

The worker pods claim their DCN NICs with a pod-level
``resourceClaims[].resourceClaimTemplateName``. The RayCluster CRD has that
flat field from KubeRay 1.4 on (built against Kubernetes >= 1.31's PodSpec);
KubeRay 1.2 and 1.3 only know ``resourceClaims[].source.resourceClaimTemplateName``,
and the API server silently prunes fields a CRD does not define, so on those
versions the pods would start without their NICs. KubeRay 1.4 is also where
RayCluster names are checked (DNS-1035, 53 characters). The CRD a cluster
serves says which it is; :func:`supports_flat_resource_claims` reads it.

Every Ray cluster of the stack runs with Ray's token auth (``authOptions``,
KubeRay >= 1.5.1): KubeRay makes a Secret per cluster (:func:`auth_secret_name`)
holding the token under :data:`AUTH_TOKEN_KEY` and gives it to every Ray
container. On an older KubeRay the API server would prune ``authOptions`` and
the cluster would run open, so the served CRD is checked first
(:func:`supports_token_auth`).

A stack that scales its slices to zero runs each job as a RayJob that brings
its own RayCluster (``gke_ray_tpu.core.ray_job``): Ray's autoscaler cannot release a
multi-host slice, so the cluster lives and dies with the run. :func:`ray_job_problems`
is what KubeRay (and Kueue) would refuse in any RayJob.
"""

from __future__ import annotations

from typing import Mapping

MIN_KUBERAY = "1.4.0"
RAYCLUSTER_CRD = "rayclusters.ray.io"
MIN_KUBERAY_AUTH = "1.5.1"
"""The first KubeRay whose RayCluster has ``spec.authOptions`` (Ray token auth)."""
AUTH_TOKEN_KEY = "auth_token"
"""The key of the token in the Secret KubeRay makes for a cluster with token auth
(``utils.RAY_AUTH_TOKEN_SECRET_KEY``)."""
RAY_VERSION = "2.60.0"
"""The Ray the job's code is written for and the submit command runs (requirements.txt): the clusters'
``rayVersion``. KubeRay refuses token auth unless ``rayVersion`` says Ray >= 2.52."""
TOKEN_AUTH = {"mode": "token"}
"""``spec.authOptions`` of every Ray cluster the stack declares: KubeRay makes the token's Secret and hands
it to every Ray container (and sends it itself on HTTPMode submissions and job-status calls)."""
AUTH_NAME_MAX = 50
"""KubeRay names a cluster's auth Secret with ``utils.CheckName``, which keeps the last 50 characters."""


def supports_flat_resource_claims(crd: Mapping) -> bool:
    """Whether a RayCluster CRD (as the API server serves it) keeps a worker pod's resourceClaimTemplateName."""
    node = _v1_spec_schema(crd)
    for step in ("workerGroupSpecs", "template", "spec", "resourceClaims"):
        node = (node.get("properties") or {}).get(step) or {}
        node = node.get("items", node)
    return "resourceClaimTemplateName" in (node.get("properties") or {})


def _v1_spec_schema(crd: Mapping) -> Mapping:
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") == "v1":
            node = (version.get("schema") or {}).get("openAPIV3Schema") or {}
            return ((node.get("properties") or {}).get("spec") or {})
    return {}


def has_token_auth(cluster_spec: Mapping) -> bool:
    """Whether a RayCluster's spec (or a RayJob's rayClusterSpec) turns Ray's token auth on (KubeRay's
    ``IsAuthEnabled``: the mode must say token; an empty authOptions leaves the cluster open)."""
    return (cluster_spec.get("authOptions") or {}).get("mode") == "token"


def supports_token_auth(crd: Mapping) -> bool:
    """Whether a RayCluster CRD (as the API server serves it) keeps ``spec.authOptions.mode``: KubeRay >= 1.5.1."""
    auth = (_v1_spec_schema(crd).get("properties") or {}).get("authOptions") or {}
    return "token" in (((auth.get("properties") or {}).get("mode") or {}).get("enum") or ())


def served_crd_problems(crd: Mapping) -> list[str]:
    """What a served RayCluster CRD would silently drop of what the stack declares; empty: nothing."""
    problems = []
    if not supports_flat_resource_claims(crd):
        problems.append(
            f"has no resourceClaims[].resourceClaimTemplateName, so its KubeRay is older than {MIN_KUBERAY} and "
            "the TPU workers get no DCN NICs"
        )
    if not supports_token_auth(crd):
        problems.append(
            f"has no authOptions, so its KubeRay is older than {MIN_KUBERAY_AUTH} and drops the token auth the "
            "stack declares: its Ray clusters accept jobs from any pod"
        )
    return problems


def head_service_name(cluster_name: str) -> str:
    """The Service KubeRay creates for a RayCluster's head (its dashboard, Jobs API, GCS and client ports)."""
    return f"{cluster_name}-head-svc"


def auth_secret_name(cluster_name: str) -> str:
    """The Secret KubeRay makes for a RayCluster with ``authOptions.mode: token`` and no ``secretName``.

    As ``reconcileAuthSecret`` names it (``utils.CheckName``): the cluster's name, cut to its last 50
    characters, with a leading digit or punctuation replaced by ``r``. A RayJob's cluster is named
    ``<rayjob>-<5 random characters>`` (``status.rayClusterName``); pass that name.
    """
    name = cluster_name[-AUTH_NAME_MAX:]
    if name[:1].isdigit() or (name[:1] and not name[:1].isalnum()):
        name = "r" + name[1:]
    return name


KUEUE_MAX_WORKER_GROUPS = 17


def ray_job_problems(manifest: Mapping) -> list[str]:
    """What KubeRay's own RayJob validation (``ValidateRayJobSpec``) would refuse, plus Kueue's rules for a
    RayJob it manages where the job brings its own cluster. Empty: accepted."""
    spec = manifest.get("spec") or {}
    problems = []
    selector = spec.get("clusterSelector") or {}
    backoff = spec.get("backoffLimit")
    if not selector and not spec.get("rayClusterSpec"):
        problems.append("one of rayClusterSpec or clusterSelector must be set")
    if selector and backoff:
        problems.append("backoffLimit > 0 is incompatible with clusterSelector")
    if spec.get("submissionMode") == "InteractiveMode" and backoff:
        problems.append("backoffLimit > 0 is incompatible with InteractiveMode")
    if backoff is not None and backoff < 0:
        problems.append("backoffLimit must not be negative")
    if spec.get("ttlSecondsAfterFinished") and not spec.get("shutdownAfterJobFinishes"):
        problems.append("ttlSecondsAfterFinished needs shutdownAfterJobFinishes")
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        problems.append("suspend needs shutdownAfterJobFinishes")
    for key in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if key in spec and spec[key] <= 0:
            problems.append(f"{key} must be positive")
    cluster = spec.get("rayClusterSpec")
    if cluster:
        if ((cluster.get("authOptions") or {}).get("enableK8sTokenAuth")):
            problems.append("Kubernetes token auth is not supported for a RayJob")
        groups = cluster.get("workerGroupSpecs") or []
        if len(groups) > KUEUE_MAX_WORKER_GROUPS:
            problems.append(f"Kueue manages at most {KUEUE_MAX_WORKER_GROUPS} worker groups")
        if any(group.get("groupName") == "head" for group in groups):
            problems.append("Kueue refuses a worker group named 'head'")
        if cluster.get("enableInTreeAutoscaling"):
            problems.append("a per-run cluster has no Ray autoscaler (it cannot release multi-host slices)")
    return problems
