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
is what KubeRay and Kueue would refuse in any RayJob, one rule set.
"""

from __future__ import annotations

import re
from typing import Mapping

from gke_ray_tpu.core.kueue import ELASTIC_JOB_ANNOTATION, HEAD_POD_SET, MAX_POD_SETS, QUEUE_LABEL

MIN_KUBERAY = "1.4.0"
RAYCLUSTER_CRD = "rayclusters.ray.io"
RAYJOB_CRD = "rayjobs.ray.io"
MIN_KUBERAY_AUTH = "1.5.1"
"""The first KubeRay whose RayCluster has ``spec.authOptions`` (Ray token auth): the floor of a stack that holds
its RayCluster."""
MIN_KUBERAY_OWN_CLUSTERS = "1.6.0"
"""The first KubeRay whose RayJob has ``spec.preRunningDeadlineSeconds``: the floor of a stack whose runs bring
their own cluster (the fields every manifest sets, checked against each release's CRDs: docs/queues.md)."""
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


def served_rayjob_problems(crd: Mapping) -> list[str]:
    """What a served RayJob CRD would silently drop of what a run that brings its own cluster sets; empty: nothing."""
    if "preRunningDeadlineSeconds" in (_v1_spec_schema(crd).get("properties") or {}):
        return []
    return [f"has no preRunningDeadlineSeconds, so its KubeRay is older than {MIN_KUBERAY_OWN_CLUSTERS} and drops "
            "the deadline every run's RayJob sets: a run that gets no capacity waits for ever"]


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


def ray_job_problems(manifest: Mapping) -> list[str]:
    """Everything that would refuse a RayJob, in one rule set; empty: accepted.

    * KubeRay's own validation (``ValidateRayJobSpec``, ``utils/validation.go``);
    * Kueue's RayJob webhook for a RayJob in a queue (its ``kueue.x-k8s.io/queue-name`` label):
      ``pkg/controller/jobs/rayjob/rayjob_webhook.go`` validateCreate, ``raycluster/common.go`` ValidateCreate and
      ``jobframework/validation.go`` ValidateJobOnCreate (Kueue v0.19.2);
    * on any cluster a run brings, whether or not it is queued yet: Kueue's limits on its pod sets (at most 18,
      none named ``head``), and the stack's rule on Ray's autoscaler: it cannot release a multi-host slice
      (tests/test_ray_node_provider.py), so a run's cluster runs one only to grow as a Kueue elastic job, whose
      growth Kueue admits against the queue's chips (``gke_ray_tpu.core.ray_job``: elastic runs).
    """
    metadata = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    queue = (metadata.get("labels") or {}).get(QUEUE_LABEL)
    problems = _kuberay_problems(spec, queued=bool(queue))
    if queue:
        problems += _kueue_problems(queue, spec)
    cluster = spec.get("rayClusterSpec")
    if cluster:
        problems += _own_cluster_problems(cluster, metadata)
    return problems


def _kuberay_problems(spec: Mapping, queued: bool) -> list[str]:
    problems = []
    selector = spec.get("clusterSelector") or {}
    backoff = spec.get("backoffLimit")
    if not selector and not spec.get("rayClusterSpec") and not queued:  # Kueue's wording says it for a queued one
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
    if ((spec.get("rayClusterSpec") or {}).get("authOptions") or {}).get("enableK8sTokenAuth"):
        problems.append("Kubernetes token auth is not supported for a RayJob")
    return problems


def _kueue_problems(queue: str, spec: Mapping) -> list[str]:
    """Kueue's webhook on a RayJob in a queue; one more, the stack's own: a queued run brings its cluster, since
    Kueue lets a RayJob with a clusterSelector through unqueued."""
    problems = []
    if not _is_dns_subdomain(queue):
        problems.append(f"the {QUEUE_LABEL} label {queue!r} is not a DNS-1123 subdomain")
    selector, cluster = spec.get("clusterSelector"), spec.get("rayClusterSpec")
    if selector and cluster:
        return problems + ["a Kueue-managed RayJob must not use an existing cluster (clusterSelector)"]
    if selector:
        return problems + ["Kueue does not queue a RayJob that runs on an existing cluster (clusterSelector)"]
    if not cluster:
        return problems + ["a Kueue-managed RayJob without clusterSelector needs rayClusterSpec"]
    if not spec.get("shutdownAfterJobFinishes"):
        problems.append("a Kueue-managed RayJob must delete its cluster when it ends (shutdownAfterJobFinishes)")
    return problems


def _own_cluster_problems(cluster: Mapping, metadata: Mapping) -> list[str]:
    problems = []
    groups = cluster.get("workerGroupSpecs") or []
    if len(groups) + 1 > MAX_POD_SETS:
        problems.append(f"{len(groups) + 1} pod sets: Kueue takes at most {MAX_POD_SETS} (the head and "
                        f"{MAX_POD_SETS - 1} worker groups)")
    if any(group.get("groupName") == HEAD_POD_SET for group in groups):
        problems.append(f"a worker group named {HEAD_POD_SET!r}: Kueue reserves it for the head")
    if cluster.get("enableInTreeAutoscaling"):
        elastic = (metadata.get("annotations") or {}).get(ELASTIC_JOB_ANNOTATION) == "true"
        queued = bool((metadata.get("labels") or {}).get(QUEUE_LABEL))
        if not (elastic and queued):
            problems.append(f"a per-run cluster runs Ray's autoscaler only as a Kueue elastic job (the {QUEUE_LABEL} "
                            f"label and {ELASTIC_JOB_ANNOTATION}: \"true\"): it cannot release a multi-host slice, and "
                            "only Kueue admits its growth against the queue's chips")
    return problems


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value) is not None
