"""One run as KubeRay runs it: a typed description (:class:`RayJobRun`) and the one builder of its RayJob.

Every RayJob of the project comes from :func:`ray_job`: a run declared in the
stack (``gke_ray_tpu.components.maxtext_run``) and one the submit command creates
(``gke_ray_tpu.training.driver.run_cluster``), on a stack that holds its slices
(:class:`HeldCluster`: ``clusterSelector`` targets its RayCluster, which the RayJob
neither owns nor deletes) or with a cluster of its own (:class:`OwnCluster`: the
stack scales its slices to zero, and KubeRay creates the run's RayCluster and
deletes it when the job ends, whatever the outcome). What varies between runs is
data in the description, metadata included, so a queue's labels and annotations
are fields, not another builder; :func:`~gke_ray_tpu.core.kuberay.ray_job_problems`
checks every manifest before it leaves here.

The job KubeRay submits is :func:`archived_command`'s: the trainer's command after
a check of the code archive in the bucket (``gke_ray_tpu.core.code_archive``), its
runtime env and its Ray job id, assembled once for declared and submitted runs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

import yaml

from gke_ray_tpu.core import code_archive
from gke_ray_tpu.core.bounds import Bounds
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import DATA_MOUNT, JobSpec, declared_submission_id, entrypoint, runtime_env
from gke_ray_tpu.core.kuberay import ray_job_problems
from gke_ray_tpu.core.kueue import ELASTIC_JOB_ANNOTATION
from gke_ray_tpu.core.kueue_quota import AUTOSCALER_REQUESTS
from gke_ray_tpu.core.naming import RAY_CLUSTER_NAME, RAY_JOB_NAME, RAY_TPU_CLUSTER_NAME

SUBMISSION_MODE = "HTTPMode"
"""How KubeRay hands a run's job to its cluster: the operator posts it to the head's Jobs API itself.

Not K8sJobMode, the default: a submitter pod would pull the Ray TPU image (tens of GB, and on every start for
a moving tag) only to run ``ray job submit``. Not InteractiveMode (the user submits, then sets ``spec.jobId``):
KubeRay refuses ``backoffLimit > 0`` with it (``ValidateRayJobSpec``, kuberay#3525), and a retry on a new
cluster is the point of a cluster per run on Spot or flex-start capacity. The operator has no files of the
submitter's, so the code reaches the cluster as the archive in the bucket (:func:`archived_command`)."""

TTL_SECONDS_AFTER_FINISHED = 60
"""Seconds KubeRay keeps a finished run's own cluster before deleting it: long enough for the submit command to
read the job's last status and log lines through its port-forward, short enough that the slices' billing
stops within a minute or two of the end (GKE then removes the idle TPU nodes)."""

BACKOFF_LIMIT = Bounds(0)
"""``backoffLimit``: KubeRay's retries of a failed run, each on a new cluster (:func:`check_backoff_limit`)."""
ACTIVE_DEADLINE_SECONDS = Bounds(1)
"""``activeDeadlineSeconds``: seconds after which KubeRay fails the RayJob (DeadlineExceeded)."""
PRE_RUNNING_DEADLINE_SECONDS = Bounds(1)
"""``preRunningDeadlineSeconds``: seconds a run may wait for its own cluster before KubeRay ends it."""
DEFAULT_PRE_RUNNING_DEADLINE_SECONDS = 1800
"""How long a run outside a queue may wait for its cluster, per attempt: the Ray head's CPU node from zero
(minutes), the TPU slices (GKE's cluster autoscaler gives up on a node that is not up within 15 minutes and
tries again), and the image pull on every host. A run still waiting after 30 minutes is more likely stuck (no
quota, no capacity) than slow. KubeRay counts it from each start of the RayJob and retries a
``PreRunningDeadlineExceeded`` like any failure while ``backoffLimit`` allows, on a new cluster
(``rayjob_controller.go``): a run can wait ``(backoffLimit + 1)`` times this long. In a queue, Kueue's
PodsReady timeout bounds the wait instead (``gke_ray_tpu.core.kueue_waiting.queued_pre_running_deadline``)."""

MEGASCALE_NUM_SLICES = "MEGASCALE_NUM_SLICES"
"""The TPU workers' env var that tells libtpu's multislice runtime how many slices the job spans (the Ray
Train worker sets it again from the slices it got): set from the slices wherever a worker group is sized."""
CLUSTER_LABEL = "ray.io/cluster"
"""KubeRay's label of a RayCluster's name: what a RayJob's ``clusterSelector`` matches."""
OWN_CLUSTER_SUFFIX = "-xxxxx"
"""What KubeRay appends to a RayJob's name for the name of the job's own RayCluster (5 random characters)."""


def check_backoff_limit(value: object, own_cluster: bool, key: str) -> int:
    """Retries of a run: only where each run brings its own cluster, since each retry is a new cluster."""
    retries = BACKOFF_LIMIT.check(value, key)
    if retries and not own_cluster:
        raise ConfigError(
            key, value,
            "0 on a stack that holds its slices: KubeRay refuses RayJob retries on an existing RayCluster (older "
            "releases deleted it to retry); Ray Train restarts the run inside its job (max_failures, 3 when elastic "
            "or on Spot), and running it again resumes it; retries, each on a new cluster, need scaleToZero (each "
            "run then brings its own cluster)",
        )
    return retries


@dataclass(frozen=True)
class JobCommand:
    """What KubeRay submits to the run's Ray head: the command, its runtime env and the Ray job id."""

    entrypoint: str
    runtime_env: Mapping[str, Any]
    job_id: str

    @property
    def runtime_env_yaml(self) -> str:
        return yaml.safe_dump(dict(self.runtime_env), sort_keys=True)


def archived_command(spec: JobSpec, code_sha256: str, *, cold_start: bool, mount: str = DATA_MOUNT,
                     job_id: Optional[str] = None) -> JobCommand:
    """The job of ``spec`` run from the code archive named by ``code_sha256`` (its full content hash), which the
    command checks before anything imports from it.

    ``mount``: where the Ray pods see the bucket that holds the archive. ``cold_start``: the run's slices start
    with it (its own cluster), so Ray Train gets the cold start's timeouts. ``job_id``: the submit command's
    submission id; unset, a declared run's id, a digest of what it runs (``declared_submission_id``).
    """
    archive, command = code_archive.checked_job(entrypoint(spec), code_sha256, mount)
    env = runtime_env(pythonpath=archive, cold_start=cold_start)
    return JobCommand(command, env, job_id or declared_submission_id(spec.run_name, command, env))


@dataclass(frozen=True)
class HeldCluster:
    """The stack's long-lived RayCluster, which the run's RayJob selects."""

    name: Any
    """Its name: a str, or a Pulumi Input of one (the RayJob then waits for the RayCluster)."""


@dataclass(frozen=True)
class OwnCluster:
    """A RayCluster the run brings: the stack's spec, with the run's slices."""

    spec: Any
    """The stack's RayCluster spec (its ``rayClusterSpec`` output): a CPU head and one TPU worker group. A
    Mapping when :func:`ray_job` builds; until then it may be a Pulumi Input of one."""
    slices: int
    """The slices the run trains on: the worker group's replicas (at most; see ``start_slices``)."""
    start_slices: Optional[int] = None
    """An elastic run in a queue: the slices its cluster starts with (its minimum), growing to ``slices`` as
    Ray Train asks, each growth admitted by Kueue (:func:`elastic_cluster`). None: every slice from the start."""

    @property
    def elastic(self) -> bool:
        return self.start_slices is not None and self.start_slices < self.slices


@dataclass(frozen=True)
class RayJobRun:
    """One run as a RayJob: where it runs, what it runs, and the limits KubeRay enforces on it."""

    name: str
    namespace: str
    command: JobCommand
    cluster: Union[HeldCluster, OwnCluster]
    backoff_limit: int = 0
    """Retries, each on a new cluster: only with an :class:`OwnCluster` (:func:`check_backoff_limit`)."""
    active_deadline_seconds: Optional[int] = None
    pre_running_deadline_seconds: Optional[int] = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def metadata(self) -> dict:
        """The RayJob's ``metadata``: known before the cluster it runs on is (a Pulumi resource's own input).
        An elastic run's cluster is Kueue's elastic job: KubeRay copies the RayJob's annotations to it
        (``constructRayClusterForRayJob``), and Kueue follows its size (``raycluster/common.go`` UpdatePodSets)."""
        metadata: dict = {"name": self.name, "namespace": self.namespace}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        annotations = dict(self.annotations)
        if isinstance(self.cluster, OwnCluster) and self.cluster.elastic:
            annotations[ELASTIC_JOB_ANNOTATION] = "true"
        if annotations:
            metadata["annotations"] = annotations
        return metadata


def ray_job(run: RayJobRun) -> dict:
    """The RayJob manifest of ``run``; a ValueError names what KubeRay (or Kueue) would refuse in it."""
    spec: dict = {
        "entrypoint": run.command.entrypoint,
        "runtimeEnvYAML": run.command.runtime_env_yaml,
        "jobId": run.command.job_id,
        "submissionMode": SUBMISSION_MODE,
        "backoffLimit": run.backoff_limit,
    }
    if isinstance(run.cluster, OwnCluster):
        own = run.cluster
        spec["shutdownAfterJobFinishes"] = True
        spec["ttlSecondsAfterFinished"] = TTL_SECONDS_AFTER_FINISHED
        spec["rayClusterSpec"] = with_slices(own.spec, own.slices, own.start_slices)
    else:
        # The selected RayCluster is the stack's, shared by its runs: the RayJob must never delete it.
        spec["clusterSelector"] = {CLUSTER_LABEL: run.cluster.name}
        spec["shutdownAfterJobFinishes"] = False
    if run.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = run.active_deadline_seconds
    if run.pre_running_deadline_seconds is not None:
        spec["preRunningDeadlineSeconds"] = run.pre_running_deadline_seconds
    manifest = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": run.metadata, "spec": spec}
    problems = ray_job_problems(manifest)
    if problems:
        raise ValueError(f"RayJob {run.namespace}/{run.name}: " + "; ".join(problems))
    return manifest


def sized_worker_group(group: Mapping[str, Any], slices: int, min_slices: Optional[int] = None,
                       start_slices: Optional[int] = None) -> dict:
    """A TPU worker group of ``slices`` slices: its replicas and their bounds, and the slice count its containers'
    libtpu is told (:data:`MEGASCALE_NUM_SLICES`). The one place a worker group gets its size, for the stack's
    RayCluster and for the cluster a run brings alike. Without an autoscaler KubeRay keeps ``replicas`` slices
    (it recreates the pods of a lost one); the bounds only have to hold them: ``min_slices`` (unset: the group's
    own floor, the stack's elasticMinSlices) at most ``slices``. ``start_slices``: an elastic run's cluster
    starts with that many (``replicas`` and ``minReplicas``) and Ray's autoscaler may raise ``replicas`` to
    ``maxReplicas`` (:func:`elastic_cluster`)."""
    floor = min_slices if min_slices is not None else int(group.get("minReplicas", slices))
    template = group.get("template") or {}
    pod = template.get("spec") or {}
    count = {"name": MEGASCALE_NUM_SLICES, "value": str(slices)}
    containers = [
        {**container, "env": [count, *(e for e in container.get("env") or [] if e.get("name") != MEGASCALE_NUM_SLICES)]}
        for container in pod.get("containers") or []
    ]
    start = slices if start_slices is None else start_slices
    low = start if start_slices is not None else min(floor, slices)
    return {**group, "replicas": start, "minReplicas": low, "maxReplicas": slices,
            "template": {**template, "spec": {**pod, "containers": containers}}}


def with_slices(cluster_spec: Mapping[str, Any], slices: int, start_slices: Optional[int] = None) -> dict:
    """``cluster_spec`` with its one TPU worker group sized for ``slices`` (:func:`sized_worker_group`); with
    ``start_slices`` below ``slices``, an elastic cluster that starts with them (:func:`elastic_cluster`)."""
    problems = own_cluster_problems(cluster_spec)
    if problems:
        raise ValueError("a run's cluster spec: " + "; ".join(problems))
    (group,) = cluster_spec["workerGroupSpecs"]
    if start_slices is not None and start_slices < slices:
        return elastic_cluster(cluster_spec, group, slices, start_slices)
    return {**cluster_spec, "workerGroupSpecs": [sized_worker_group(group, slices)]}


AUTOSCALER_VERSION = "v2"
"""Ray's autoscaler v2: its KubeRay cloud provider counts a multi-host group's replicas as slices (it divides
the hosts it wants by ``numOfHosts``, ``ray/autoscaler/v2/instance_manager/cloud_providers/kuberay``), where v1's
counts pods and reaches a slice only through the ``maxReplicas`` cap (tests/test_ray_node_provider.py)."""
AUTOSCALER_IDLE_TIMEOUT_S = 3600
"""Seconds a worker may sit idle before Ray's autoscaler releases it: longer than a run's start (image pulls,
Ray Train's reservation, the first compile), so a slice the run is about to use is never taken away; the
cluster goes with its run in any case."""
API_TOKEN_VOLUME = "autoscaler-api-token"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where Ray's KubeRay provider reads its token and the API server's CA (``IN_CLUSTER_TOKEN_PATH``)."""
API_TOKEN_SECONDS = 3600
"""The projected token's lifetime; the kubelet renews it before it expires."""


def elastic_cluster(cluster_spec: Mapping[str, Any], group: Mapping[str, Any], slices: int,
                    start_slices: int) -> dict:
    """An elastic run's own cluster: it starts with ``start_slices`` slices, and Ray's autoscaler (a sidecar of
    the head, ``enableInTreeAutoscaling``) raises its TPU group's ``replicas`` to ``slices`` when Ray Train asks
    for them; Kueue admits each larger size as a new Workload slice and only then lets its pods schedule
    (docs/queues.md: Elastic runs on their minimum).

    The autoscaler is the one container of the run that calls the Kubernetes API: KubeRay binds the head's
    service account to a Role that may get and patch the cluster's RayCluster and pods (``common/rbac.go``), and
    the token is a projected volume mounted into the autoscaler's container alone (``autoscalerOptions.volumeMounts``,
    ``common/pod.go`` mergeAutoscalerOverrides): the Ray head, where every run's driver runs, still has none
    (``automountServiceAccountToken: false``). It runs as hardened as the head's Ray container."""
    head = cluster_spec["headGroupSpec"]
    template = head.get("template") or {}
    pod = template.get("spec") or {}
    ray_container = (pod.get("containers") or [{}])[0]
    token = {"name": API_TOKEN_VOLUME, "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": API_TOKEN_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]}}
    options: dict = {
        "version": AUTOSCALER_VERSION,
        "idleTimeoutSeconds": AUTOSCALER_IDLE_TIMEOUT_S,
        "resources": {"requests": dict(AUTOSCALER_REQUESTS), "limits": dict(AUTOSCALER_REQUESTS)},
        "volumeMounts": [{"name": API_TOKEN_VOLUME, "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}],
    }
    if ray_container.get("securityContext"):
        options["securityContext"] = dict(ray_container["securityContext"])
    head_pod = {**pod, "volumes": [*(pod.get("volumes") or []), token]}
    return {
        **cluster_spec,
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": options,
        "headGroupSpec": {**head, "template": {**template, "spec": head_pod}},
        "workerGroupSpecs": [sized_worker_group(group, slices, start_slices=start_slices)],
    }


def own_cluster_problems(cluster_spec: Mapping[str, Any]) -> list[str]:
    """What makes ``cluster_spec`` unfit for a run's own cluster: what KubeRay and Kueue refuse in a RayJob that
    brings it, and anything but the one TPU worker group the builder sizes. Empty: fit."""
    problems = ray_job_problems({"spec": {"rayClusterSpec": cluster_spec, "shutdownAfterJobFinishes": True}})
    if len(cluster_spec.get("workerGroupSpecs") or []) != 1:
        problems.append("one TPU worker group")
    return problems


def is_multi_host(cluster_spec: Mapping[str, Any]) -> bool:
    return any(int(g.get("numOfHosts", 1)) > 1 for g in cluster_spec.get("workerGroupSpecs") or [])


def own_cluster_name_pattern(job_name: str) -> str:
    """The name KubeRay gives a RayJob's own cluster, with its random part as ``xxxxx``."""
    return job_name + OWN_CLUSTER_SUFFIX


def max_ray_job_name(multi_host: bool) -> int:
    """The longest RayJob name whose own cluster's name KubeRay and, for multi-host slices, GKE's TPU webhook
    accept (``gke_ray_tpu.core.naming``)."""
    cluster_rule = RAY_TPU_CLUSTER_NAME if multi_host else RAY_CLUSTER_NAME
    return min(RAY_JOB_NAME.max_length, cluster_rule.max_length - len(OWN_CLUSTER_SUFFIX))


def ray_job_name(submission_id: str, max_length: int) -> str:
    """The RayJob of a submission: its id where that is a valid name, else a cut of it and a digest."""
    if RAY_JOB_NAME.matches(submission_id) and len(submission_id) <= max_length:
        return submission_id
    name = re.sub(r"[^a-z0-9-]+", "-", submission_id.lower()).strip("-")
    digest = hashlib.sha256(submission_id.encode()).hexdigest()[:8]
    return f"{name[:max_length - len(digest) - 1].rstrip('-')}-{digest}"
