"""The objects of a stack's Kueue queue: the ResourceFlavors, the ClusterQueue, the LocalQueue and, with GKE's
queued provisioning, its AdmissionCheck and ProvisioningRequestConfig (``kueue.x-k8s.io/v1beta2``, Kueue v0.19.2).
Pure builders: the TpuQueue component declares them, the preview reads the ClusterQueue it would declare, and
the tests hold them against Kueue's CRDs and a fake Kueue.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Mapping, Optional

from gke_ray_tpu.core.kueue import API_VERSION, DCN_NIC, STRICT_FIFO, TPU, QueueNames
from gke_ray_tpu.core.quantities import format_quantity
from gke_ray_tpu.core.tpu_catalogue import SliceShape

TPU_TOLERATION = {"key": TPU, "operator": "Exists", "effect": "NoSchedule"}
"""GKE taints TPU nodes ``google.com/tpu``; a flavor's tolerations are added to the pods Kueue admits to it.
Not ``nodeTaints``: those are checked against the pod set's own tolerations, which the template lacks (GKE
adds the toleration to TPU pods only when they are created)."""
QUEUED_PROVISIONING_TAINT = "cloud.google.com/gke-queued"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"


def _object(kind: str, name: str, spec: dict, namespace: Optional[str] = None) -> dict:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def tpu_flavor(names: QueueNames, shape: SliceShape, capacity_label: Optional[str], queued: bool) -> dict:
    """The ResourceFlavor of the stack's slice shape: GKE's TPU node labels (and the capacity mode's, which the
    worker pods select too), tolerating the TPU taint, and with queued provisioning the ``gke-queued`` one."""
    labels = {
        "cloud.google.com/gke-tpu-accelerator": shape.generation.gke_accelerator,
        "cloud.google.com/gke-tpu-topology": shape.topology,
    }
    if capacity_label:
        labels[capacity_label] = "true"
    tolerations = [dict(TPU_TOLERATION)]
    if queued:
        tolerations.append({"key": QUEUED_PROVISIONING_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    return _object("ResourceFlavor", names.tpu_flavor, {"nodeLabels": labels, "tolerations": tolerations})


def host_flavor(names: QueueNames) -> dict:
    """The flavor the pods' cpu and memory are counted under, the head's and the TPU workers' alike: no node
    labels (every node carries them: the CPU pool's, where the head runs, and the TPU pools'), so admitting a pod
    set to it adds nothing to where it runs. The chips are in another resource group, so the head, which asks
    for none, never takes the TPU flavor and its node labels (``assignFlavors`` looks a flavor up by resource)."""
    return _object("ResourceFlavor", names.host_flavor, {})


@dataclass(frozen=True)
class Sharing:
    """How a stack's queue shares TPU chips with other teams' queues (a Kueue cohort)."""

    cohort: str
    borrowing_limit: Optional[int] = None
    """Chips this queue may borrow from the cohort; None: as many as the others leave unused."""
    lending_limit: Optional[int] = None
    """Chips of its own the others may borrow; None: all of them while unused."""


HOST_RESOURCES = ("cpu", "memory")


def cluster_queue(names: QueueNames, namespace: str, quota: Mapping[str, Decimal], *,
                  sharing: Optional[Sharing] = None, queueing_strategy: str = STRICT_FIFO,
                  admission_check: bool = False) -> dict:
    """The stack's ClusterQueue: ``quota`` (``core.kueue_quota.queue_quota``), its TPU resources (the chips,
    and the DCN NICs where counted) under the slice shape's flavor, cpu and memory under the host flavor, so that
    every pod set of a run takes a flavor; runs from the stack's namespace only (a null ``namespaceSelector``
    admits none)."""
    tpu_resources = [r for r in (TPU, DCN_NIC) if quota.get(r)]
    tpu = [_quota_entry(r, quota[r], sharing if r == TPU else None) for r in tpu_resources]
    host = [_quota_entry(r, quota[r], None) for r in HOST_RESOURCES]
    groups = [{"coveredResources": tpu_resources, "flavors": [{"name": names.tpu_flavor, "resources": tpu}]},
              {"coveredResources": list(HOST_RESOURCES), "flavors": [{"name": names.host_flavor, "resources": host}]}]
    spec: dict = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "queueingStrategy": queueing_strategy,
        "resourceGroups": groups,
    }
    if sharing:
        spec["cohortName"] = sharing.cohort
    if admission_check:
        spec["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": names.admission_check, "onFlavors": [names.tpu_flavor]}]
        }
    return _object("ClusterQueue", names.cluster_queue, spec)


def _quota_entry(resource: str, nominal: Decimal, sharing: Optional[Sharing]) -> dict:
    entry: dict = {"name": resource, "nominalQuota": format_quantity(nominal)}
    if sharing and sharing.borrowing_limit is not None:
        entry["borrowingLimit"] = sharing.borrowing_limit
    if sharing and sharing.lending_limit is not None:
        entry["lendingLimit"] = sharing.lending_limit
    return entry


def local_queue(names: QueueNames, namespace: str) -> dict:
    return _object("LocalQueue", names.local_queue, {"clusterQueue": names.cluster_queue}, namespace)


def admission_check(names: QueueNames) -> dict:
    """The AdmissionCheck that sends the TPU pod set to GKE's queued provisioning (flex-start, one slice)."""
    return _object("AdmissionCheck", names.admission_check, {
        "controllerName": PROVISIONING_CONTROLLER,
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                       "name": names.admission_check},
    })


def provisioning_request_config(names: QueueNames, max_run_duration_s: Optional[int] = None) -> dict:
    """Its ProvisioningRequestConfig: GKE's queued-provisioning class for the pod sets that ask for TPU chips
    only (``managedResources``), so the CPU head is not part of the request."""
    spec: dict = {"provisioningClassName": QUEUED_PROVISIONING_CLASS, "managedResources": [TPU]}
    if max_run_duration_s is not None:
        spec["parameters"] = {"maxRunDurationSeconds": str(max_run_duration_s)}
    return _object("ProvisioningRequestConfig", names.admission_check, spec)
