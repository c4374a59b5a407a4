"""The Kubernetes objects of a multislice TPU RayCluster, as plain dicts.

Pure functions (no Pulumi): RayTpuCluster registers them, the offline preview
prints them as YAML, and the tests validate them against the KubeRay CRD and
the Kubernetes schemas. Values may be Pulumi Inputs (a bucket name from
another resource); Pulumi resolves them inside the dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from gke_ray_tpu.core.job_spec import DATA_MOUNT
from gke_ray_tpu.core.capacity import CapacityMode
from gke_ray_tpu.core.libtpu_flags import libtpu_init_args
from gke_ray_tpu.core.kuberay import RAY_VERSION, TOKEN_AUTH, head_service_name
from gke_ray_tpu.core.ray_job import sized_worker_group
from gke_ray_tpu.core.tpu_catalogue import SliceShape

GCS_PORT = 6379
DASHBOARD_PORT = 8265
CLIENT_PORT = 10001
WORKER_METRICS_EXPORT_PORT = 8082
HEAD_METRICS_EXPORT_PORT = 8080
"""KubeRay's default ``--metrics-export-port`` (``utils.DefaultMetricsPort``), which the head keeps."""
RAY_WORKER_PORTS = range(10002, 20000)
"""``ray start``'s default --min-worker-port/--max-worker-port: a port for each Ray worker process (the
Ray Train workers that run MaxText among them), on every pod."""
RAY_RANDOM_PORTS = range(32768, 65536)
"""Where the ports Ray leaves unset land: the node manager, object manager, runtime env and dashboard agents
(52365 by default) and the JAX coordinator of Ray Train. Ray picks them at random from the kernel's first
ephemeral port (Linux: 32768) up, so any port here may be taken before the workers' JAX starts."""
POD_PORTS = {
    GCS_PORT: "the head's GCS server",
    WORKER_METRICS_EXPORT_PORT: "the workers' metrics export port",
    DASHBOARD_PORT: "the head's dashboard and Jobs API",
    CLIENT_PORT: "the head's Ray client server",
}
"""The fixed ports the RayCluster's pods listen on (this module's manifest sets them)."""
WORKER_GROUP = "tpu-group"
RAY_POD_LABEL = "gke-ray-tpu/ray-cluster"
"""On every Ray pod a RayTpuCluster declares, valued with its name: what its NetworkPolicy selects. A run's
own cluster has a generated name (``<run>-<random>``), so KubeRay's ``ray.io/cluster`` cannot be known
when the policy is made; this label is the same on the stack's long-lived cluster and on every run's."""
RAY_UID = 1000
"""The ``ray`` user of Ray's images (``docker/base-deps``: ``RAY_UID=1000``), which the processes already run
as; stating it lets the kubelet enforce ``runAsNonRoot`` whatever the image's ``USER`` line says."""
PROMETHEUS_NAMESPACES = ("gmp-system", "gke-gmp-system")
"""Where Managed Service for Prometheus' collectors run (self-deployed and GKE-managed collection)."""
OPERATOR_NAMESPACES = ("kube-system",)
"""Where the GKE-hosted KubeRay operator's calls to a head's Jobs API are admitted from. Unconfirmed: no Google
page says where the add-on's operator runs or how it reaches a head. Not a pod label in any namespace: anyone
who may create a pod anywhere could wear it. docs/security.md says what to add if runs stay unsubmitted."""
NETDEV_DEVICE_CLASS = "netdev.google.com"
FILE_CACHE_MB = 4096
"""The mount's file cache, on the node's boot disk (the sidecar's cache volume). Bounded: with
``gke-gcsfuse/ephemeral-storage-limit: "0"`` nothing else stops it, and an unbounded cache
(``-1``, the tutorial's) could fill the disk the kubelet and the Ray TPU image need, and get the
pod evicted. What is read through /data is the code archive and compiled programs: tens to
hundreds of MB, while checkpoints go to gs:// and never pass through the mount."""

GCS_FUSE_MOUNT_OPTIONS = ",".join((
    # Objects written through the API (the code archive, MaxText's files) have no directory
    # placeholder objects on a flat bucket; without this their directories are not seen.
    "implicit-dirs",
    # The tutorial's: the Ray images run as uid 1000.
    "uid=1000", "gid=1000", "dir-mode=775", "file-mode=664",
    # From Google's mount for checkpoints and the JAX cache (gcsfuse samples/gke-csi-yaml/tpu/
    # checkpointing-pv.yaml; gke_ray_tpu.core.gke.GCS_FUSE_TUNING_MIN_VERSION): what is read here is write-to-new
    # (archives named by digest, cache entries by key), so a cached stat never goes stale ...
    "metadata-cache:ttl-secs:-1", "metadata-cache:stat-cache-max-size-mb:-1", "metadata-cache:type-cache-max-size-mb:-1",
    # ... but an entry host 0 has just written must be seen by a host that missed it a moment ago.
    "metadata-cache:negative-ttl-secs:0",
    f"file-cache:max-size-mb:{FILE_CACHE_MB}",
    # zipimport reads the code archive in ranges (its directory, then each module): cache the whole file.
    "file-cache:cache-file-for-range-read:true",
    # A large file (a compiled program) comes into the cache in parallel chunks: a restart's first read waits less.
    "file-cache:enable-parallel-downloads:true",
))
"""Options of the bucket's GCS FUSE mount at /data (``gke_ray_tpu.core.job_spec.DATA_MOUNT``).

Left out of Google's checkpointing sample, on purpose: ``read_ahead_kb`` and streaming writes
(large sequential checkpoint reads and writes, which go to gs:// directly; streaming writes are
gcsfuse 3's default anyway), ``gcsfuseMetadataPrefetchOnMount`` (it would list the whole bucket,
every checkpoint of every run, on each pod start), and ``rename-dir-limit`` (nothing renames a
directory through the mount any more)."""

# The tutorial's pod requests and limits.
HEAD_CPU, HEAD_MEMORY = "8", "16Gi"
WORKER_CPU, WORKER_MEMORY = "8", "200G"


@dataclass(frozen=True)
class RayClusterSpec:
    """What varies between RayClusters (RayTpuCluster resolves every default)."""

    name: str
    namespace: str
    service_account: Any
    """The Kubernetes service account of the pods (a str, or a Pulumi Input of one)."""
    bucket_name: Any
    """The checkpoint bucket's name (a str, or a Pulumi Input of one)."""
    shape: SliceShape
    num_slices: int
    elastic_min_slices: int
    dcn_interfaces: int
    image: Any
    """The pods' image: a reference, or a Pulumi Output of one (a WorkerImage's ref, by digest)."""
    megascale_port: int
    compute_class: Optional[str]
    """Autopilot: the ComputeClass that provisions the TPU nodes."""
    capacity: CapacityMode
    """How the slices' VMs are obtained: Spot and flex-start slices are selected by their node label."""
    scale_to_zero: bool
    """No long-lived RayCluster: every run is a RayJob that brings a cluster of this spec and deletes it at its end."""

    @property
    def claim_template_name(self) -> str:
        return f"{self.name}-dcn-netdev"

    @property
    def head_service(self) -> str:
        """The Service KubeRay creates for the head pod."""
        return head_service_name(self.name)


def port_use(port: int) -> Optional[str]:
    """What of Ray may already listen on ``port`` in the RayCluster's pods; None: nothing this module knows of."""
    if port in POD_PORTS:
        return POD_PORTS[port]
    if port in RAY_WORKER_PORTS:
        return "in Ray's worker port range"
    if port in RAY_RANDOM_PORTS:
        return "in the range Ray picks its other ports from at random"
    return None


def is_moving_tag(image: str) -> bool:
    """Whether ``image`` names a tag that its publisher moves to new builds (no tag, latest, nightly)."""
    if "@sha256:" in image:
        return False
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    # nightly.<yymmdd>.<sha>-... is one dated build; nightly and nightly-<flavour> move every night.
    return not tag or tag == "latest" or (tag.startswith("nightly") and not tag.startswith("nightly."))


def image_pull_policy(image: Any) -> str:
    """Moving tags must be pulled every time, or head and workers can run different Ray builds. An image the
    stack computes (a WorkerImage's ref, an Output) is named by its digest and never moves."""
    return "Always" if isinstance(image, str) and is_moving_tag(image) else "IfNotPresent"


CONTAINER_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
    "runAsNonRoot": True,
    "runAsUser": RAY_UID,
}
"""Every Ray container's (KubeRay copies it onto the workers' wait-gcs-ready init container). The Ray
processes run as uid 1000, so they held no capabilities to begin with; dropping the bounding set and
``allowPrivilegeEscalation: false`` (no_new_privs) also stop the image's password-less ``sudo`` and any
setuid binary. The TPU chips need none of it: GKE >= 1.28 gives a TPU container its devices without
privileges. docs/security.md lists what each setting was checked against."""


def hardened(container: dict) -> dict:
    """A Ray container with :data:`CONTAINER_SECURITY_CONTEXT`."""
    return {**container, "securityContext": dict(CONTAINER_SECURITY_CONTEXT)}


def pod_labels(spec: "RayClusterSpec") -> dict:
    """The labels of every Ray pod of the cluster (its NetworkPolicy selects them)."""
    return {RAY_POD_LABEL: spec.name}


def network_policy(spec: "RayClusterSpec") -> dict:
    """Ingress to the Ray pods: any port from the same RayTpuCluster's Ray pods, the metrics ports from
    Managed Prometheus, the head's Jobs API from the KubeRay operator, nothing else.

    Same RayTpuCluster, not same Ray cluster: on a stack that scales to zero every run has its own cluster
    under a generated name, so runs of one stack can reach each other (all of them are the stack's own
    jobs, with the same service account). Ray picks most of its ports at random (raylet, object manager,
    agents, the JAX coordinator), so within the stack no port list would hold. The kubelet's probes come
    from the node, which a NetworkPolicy never blocks; ``kubectl port-forward`` enters through the pod's
    own network namespace and is not subject to it either: RBAC ``pods/portforward`` gates that path.
    """
    own = {"podSelector": {"matchLabels": pod_labels(spec)}}
    prometheus = {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(PROMETHEUS_NAMESPACES)}
    ]}}
    operator = {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(OPERATOR_NAMESPACES)}
    ]}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{spec.name}-ray-ingress", "namespace": spec.namespace},
        "spec": {
            "podSelector": {"matchLabels": pod_labels(spec)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [own]},
                {"from": [prometheus], "ports": [
                    {"protocol": "TCP", "port": port} for port in (HEAD_METRICS_EXPORT_PORT, WORKER_METRICS_EXPORT_PORT)
                ]},
                {"from": [operator], "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}]},
            ],
        },
    }


def resource_claim_template(spec: RayClusterSpec) -> dict:
    """The DRA claim that gives each TPU worker pod exactly the slice's DCN NICs."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": spec.claim_template_name, "namespace": spec.namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "req-netdev",
                            "exactly": _netdev_request(spec),
                        }
                    ]
                }
            }
        },
    }


def _netdev_request(spec: RayClusterSpec) -> dict:
    """Exactly the stack's DCN networks on Standard; on Autopilot the accelerator network
    profile makes the networks, so the pod takes every netdev the node has (Google's sample)."""
    if spec.compute_class:
        return {"deviceClassName": NETDEV_DEVICE_CLASS, "allocationMode": "All"}
    return {"deviceClassName": NETDEV_DEVICE_CLASS, "allocationMode": "ExactCount", "count": spec.dcn_interfaces}


def compute_class(spec: RayClusterSpec) -> dict:
    """Autopilot's way to ask for TPU nodes with DRANET: a ComputeClass with ANP ``auto``.

    As Google's DRANET sample for TPUs: the machine type in the priority, the
    accelerator and topology from the worker pods' node selectors.
    """
    priority: dict = {"machineType": spec.shape.machine_type, "spot": spec.capacity.spot}
    if spec.dcn_interfaces:
        priority["acceleratorNetworkProfile"] = "auto"
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": spec.compute_class},
        "spec": {
            "nodePoolAutoCreation": {"enabled": True},
            "nodePoolConfig": {"dra": {"networking": {"enabled": bool(spec.dcn_interfaces)}}},
            "priorities": [priority],
        },
    }


def _pod_annotations() -> dict:
    # "0" lifts the sidecar's own limits, so checkpoint writes are not throttled.
    return {
        "gke-gcsfuse/volumes": "true",
        "gke-gcsfuse/cpu-limit": "0",
        "gke-gcsfuse/memory-limit": "0",
        "gke-gcsfuse/ephemeral-storage-limit": "0",
    }


def _volumes(spec: RayClusterSpec) -> list:
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {
            "name": "gcs-fuse-csi-ephemeral",
            "csi": {
                "driver": "gcsfuse.csi.storage.gke.io",
                "volumeAttributes": {"bucketName": spec.bucket_name, "mountOptions": GCS_FUSE_MOUNT_OPTIONS},
            },
        },
    ]


_VOLUME_MOUNTS = [
    {"name": "gcs-fuse-csi-ephemeral", "mountPath": DATA_MOUNT},
    {"name": "dshm", "mountPath": "/dev/shm"},
]


def worker_env(spec: RayClusterSpec) -> list:
    """The TPU workers' environment, less the slice count the group's size sets (``sized_worker_group``)."""
    env = {
        "MEGASCALE_PORT": str(spec.megascale_port),
        "JAX_PLATFORMS": "tpu,cpu",
        "ENABLE_PJRT_COMPATIBILITY": "true",
        "LIBTPU_INIT_ARGS": libtpu_init_args(spec.shape.generation.name, spec.dcn_interfaces),
    }
    return [{"name": key, "value": value} for key, value in env.items()]


def _worker_node_selector(spec: RayClusterSpec) -> dict:
    selector = {
        "iam.gke.io/gke-metadata-server-enabled": "true",
        "cloud.google.com/gke-tpu-accelerator": spec.shape.generation.gke_accelerator,
        "cloud.google.com/gke-tpu-topology": spec.shape.topology,
    }
    if spec.compute_class:
        selector["cloud.google.com/compute-class"] = spec.compute_class
    if spec.capacity.node_label:
        selector[spec.capacity.node_label] = "true"
    return selector


def ray_cluster(spec: RayClusterSpec) -> dict:
    """The long-lived RayCluster of a stack that holds its slices."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": spec.name, "namespace": spec.namespace},
        "spec": ray_cluster_spec(spec),
    }


def ray_cluster_spec(spec: RayClusterSpec) -> dict:
    """A RayCluster's ``spec``: a CPU head and one TPU worker group whose replicas are slices.

    The one builder of both kinds of cluster: the long-lived RayCluster of a held stack
    (:func:`ray_cluster`) and the ``rayClusterSpec`` every run of a scale-to-zero stack brings
    (``gke_ray_tpu.core.ray_job``, which sizes its group for the run's slices). Neither runs Ray's
    autoscaler to release slices: KubeRay's node provider cannot release a multi-host slice (it deletes
    the idle pods and, ``replicas`` unchanged, KubeRay recreates them; tests/test_ray_node_provider.py),
    so a stack that scales to zero does it by deleting the whole cluster when the run ends. Only an
    elastic run's own cluster adds the autoscaler, to grow from its minimum
    (``gke_ray_tpu.core.ray_job.elastic_cluster``).
    """
    group = {
        "groupName": WORKER_GROUP,
        "numOfHosts": spec.shape.hosts,
        "rayStartParams": {"metrics-export-port": str(WORKER_METRICS_EXPORT_PORT)},
        "template": {"metadata": {"labels": pod_labels(spec), "annotations": _pod_annotations()},
                     "spec": _worker_pod(spec)},
    }
    return {
        "rayVersion": RAY_VERSION,
        "authOptions": dict(TOKEN_AUTH),
        "headGroupSpec": {
            # ClusterIP only: the dashboard and Jobs API are reached by port-forward, never publicly.
            "serviceType": "ClusterIP",
            "rayStartParams": {},
            "template": {"metadata": {"labels": pod_labels(spec), "annotations": _pod_annotations()},
                         "spec": _head_pod(spec)},
        },
        "workerGroupSpecs": [sized_worker_group(group, spec.num_slices, spec.elastic_min_slices)],
    }


def _head_pod(spec: RayClusterSpec) -> dict:
    return {
        "serviceAccountName": spec.service_account,
        # The Ray container never calls the Kubernetes API (the GCS FUSE driver gets its token from
        # the kubelet); an elastic run's autoscaler sidecar gets a token mounted into it alone
        # (gke_ray_tpu.core.ray_job.elastic_cluster).
        "automountServiceAccountToken": False,
        "containers": [
            hardened({
                "name": "ray-head",
                "image": spec.image,
                "imagePullPolicy": image_pull_policy(spec.image),
                "ports": [
                    {"containerPort": GCS_PORT, "name": "gcs-server"},
                    {"containerPort": DASHBOARD_PORT, "name": "dashboard"},
                    {"containerPort": CLIENT_PORT, "name": "client"},
                ],
                "resources": {
                    "limits": {"memory": HEAD_MEMORY},
                    "requests": {"cpu": HEAD_CPU, "memory": HEAD_MEMORY},
                },
                "volumeMounts": _VOLUME_MOUNTS,
            })
        ],
        "volumes": _volumes(spec),
        "nodeSelector": {"iam.gke.io/gke-metadata-server-enabled": "true"},
    }


def _worker_pod(spec: RayClusterSpec) -> dict:
    tpu = str(spec.shape.chips_per_host)
    container: dict = hardened({
        "name": "ray-worker",
        "image": spec.image,
        "imagePullPolicy": image_pull_policy(spec.image),
        "resources": {
            "limits": {"memory": WORKER_MEMORY, "google.com/tpu": tpu},
            "requests": {"cpu": WORKER_CPU, "memory": WORKER_MEMORY, "google.com/tpu": tpu},
        },
        "env": worker_env(spec),
        # No privileged securityContext (the tutorial's has one): GKE >= 1.28 gives TPU
        # containers the device access without it, and Autopilot refuses privileged pods.
        "volumeMounts": _VOLUME_MOUNTS,
    })
    pod: dict = {
        "serviceAccountName": spec.service_account,
        # Nothing on a worker calls the Kubernetes API: Workload Identity needs no token in the pod
        # (the metadata server knows the pod by its IP), and the GCS FUSE driver gets the pod's token
        # from the kubelet (CSIDriver tokenRequests).
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": _volumes(spec),
        "nodeSelector": _worker_node_selector(spec),
    }
    if spec.dcn_interfaces:
        pod["resourceClaims"] = [{"name": "netdev", "resourceClaimTemplateName": spec.claim_template_name}]
        container["resources"]["claims"] = [{"name": "netdev"}]
    return pod
