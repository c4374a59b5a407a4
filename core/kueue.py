"""Kueue as the stack meets it: the release it installs, its API and the labels a run carries, and the names of
one stack's queue objects. Kueue's rules for a RayJob are among the one rule set every RayJob passes
(``gke_ray_tpu.core.kuberay.ray_job_problems``).

Pure (no Pulumi, no Kubernetes client). Everything here and in the modules beside it was read in Kueue v0.19.2
(``git show v0.19.2:<file>`` of kubernetes-sigs/kueue), the release the stack installs; docs/queues.md says what
it means for a run and what stays unverified. Beside it: what a run asks of a queue and what a queue can give
(``core.kueue_quota``), what waiting costs and Kueue's deadlines against KubeRay's (``core.kueue_waiting``); the
queue's manifests and Kueue's own configuration are the TpuQueue component's (``components.queue_manifests``,
``components.kueue_config``), a Workload read back for a person is the submit command's
(``training.driver.queue_status``).

* The API is ``kueue.x-k8s.io/v1beta2``, Kueue's storage version (``apis/kueue/v1beta2``); a ClusterQueue
  names its team grouping ``cohortName`` and its checks ``admissionChecksStrategy.admissionChecks``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gke_ray_tpu.core.naming import DNS_LABEL

KUEUE_VERSION = "0.19.2"
"""The Kueue the stack installs: its Helm chart version (the image is ``registry.k8s.io/kueue/kueue:v0.19.2``,
``hack/helm-chart-package.sh``). 0.19.1 is the first that releases the quota of a RayJob that fails validation."""
API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label that puts a RayJob in a LocalQueue (``pkg/controller/constants``)."""
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label on a Workload holding the UID of the job it was made for."""
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
"""With ``"true"`` (and in-tree autoscaling), Kueue follows the run's RayCluster as it grows, admitting each
larger size as a new Workload slice (``pkg/workloadslicing``; the ElasticJobsViaWorkloadSlices gate, on by
default since 0.18)."""
MAX_POD_SETS = 18
"""``jobframework.MaxPodSets``: the head and at most 17 worker groups."""
HEAD_POD_SET = "head"
TPU = "google.com/tpu"
DCN_NIC = "dcn-nic"
"""The resource a cluster's own Kueue is expected to count the DRANET NICs a TPU worker claims as (its
``resources.deviceClassMappings``); the Kueue the stack installs does not count them (``components.kueue_config.FEATURE_GATES``)."""
NETDEV_DEVICE_CLASS = "netdev.google.com"
IGNORE_UNDECLARED, BLOCK_UNDECLARED = "IgnoreUndeclared", "BlockUndeclared"
"""Kueue's ``resources.quotaCheckStrategy``: skip what a ClusterQueue does not cover, or refuse it (the default,
``apis/config/v1beta2/defaults.go``). The Kueue the stack installs runs with the first (:func:`quota_check_strategy`)."""
EVICTED_BY_PODS_READY_TIMEOUT = "PodsReadyTimeout"
STRICT_FIFO, BEST_EFFORT_FIFO = "StrictFIFO", "BestEffortFIFO"
QUEUEING_STRATEGIES = (STRICT_FIFO, BEST_EFFORT_FIFO)


@dataclass(frozen=True)
class QueueNames:
    """The names of one stack's Kueue objects. The LocalQueue lives in the stack's namespace; the others are
    cluster-scoped, so they carry the namespace too and two stacks on one GKE cluster never share one."""

    local_queue: str
    cluster_queue: str
    tpu_flavor: str
    host_flavor: str
    admission_check: str


def queue_names(ray_cluster_name: str, namespace: str, key: str) -> QueueNames:
    """Every name derived from the stack's RayTpuCluster name and namespace, each a DNS label (the LocalQueue's
    is a label value on every run, and Kueue puts the others in labels and metrics); ``key`` is the setting the
    names come from, for the error."""
    scoped = f"{ray_cluster_name}-{namespace}"
    names = QueueNames(
        local_queue=ray_cluster_name,
        cluster_queue=scoped,
        tpu_flavor=f"{scoped}-tpu",
        host_flavor=f"{scoped}-host",
        admission_check=f"{scoped}-provisioning",
    )
    for field_name, name in vars(names).items():
        DNS_LABEL.check_derived(name, ray_cluster_name, key, f"Kueue {field_name.replace('_', ' ')} name")
    return names


def quota_check_strategy(installed: bool) -> str:
    """How a stack's Kueue checks a run's resources: the one the stack installs skips what its queue does not
    cover (``components.kueue_config``); a cluster's own keeps Kueue's default, which refuses it."""
    return IGNORE_UNDECLARED if installed else BLOCK_UNDECLARED


def queue_label(local_queue: str) -> dict:
    """The label every run of a stack with a queue carries, declared or submitted (``RayJobRun.labels``)."""
    return {QUEUE_LABEL: local_queue}
