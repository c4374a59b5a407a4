"""What the Google identity that runs ``pulumi up`` needs: for each type the stack can register, the permissions
Google's APIs check for its create, read, update and delete, and the predefined roles that grant them.

Each entry cites the Google page that names the permissions. The provider reads every resource back after creating
it and at each preview and refresh, so a resource needs its ``get`` permission too. Three kinds of type:

* Google Cloud resources (``gcp:...``) and the image (``docker-build:...``, a push to Artifact Registry): the
  permissions of the API methods Pulumi's provider calls, from the service's IAM reference;
* Kubernetes objects (``kubernetes:<group>/<version>:<Kind>``): GKE checks each request to the cluster's API server
  against Kubernetes RBAC first and IAM next, and the deployer has no RBAC binding of its own, so IAM must grant it:
  ``container.<resource>.<verb>`` for a built-in resource, ``container.thirdPartyObjects.<verb>`` for an object of a
  CustomResourceDefinition (KubeRay's, Kueue's, GKE's ComputeClass) (GKE's "API permissions" page). For a resource
  GKE's IAM names no permission for (DRA's ``resourceclaimtemplates``) the need is written as its RBAC rule,
  ``rbac:<group>/<resource>.<verb>``, which ``roles/container.admin`` covers (Google: "full management of clusters
  and their Kubernetes API objects") and a custom role cannot; Kueue's Helm chart counts as every object it renders;
* invokes the program makes (``getProject``, ``getCluster``...) and the objects it reads (``Cluster.get``, a CRD):
  their read permissions. Components (``gke-ray-tpu:index:*``) call no API themselves.

:data:`ROLES` lists, per predefined role the docs recommend, the permissions of it the stack uses, from Google's
role reference pages; ``python -m gke_ray_tpu.stack.permissions --check-roles DIR`` checks them against role
definitions as ``gcloud iam roles describe roles/<role> --format=json`` writes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

OPERATIONS = ("create", "read", "update", "delete")
RBAC = "rbac:"
"""The prefix of a Kubernetes RBAC rule no IAM permission stands for: ``rbac:<group>/<resource>.<verb>``."""

GKE_API = "https://cloud.google.com/kubernetes-engine/docs/reference/api-permissions"
GKE_ROLES = "https://cloud.google.com/iam/docs/roles-permissions/container"
GKE_RBAC = "https://cloud.google.com/kubernetes-engine/docs/how-to/role-based-access-control"
COMPUTE_API = "https://cloud.google.com/compute/docs/reference/rest/v1/{}/insert"
STORAGE_API = "https://cloud.google.com/storage/docs/access-control/iam-json"
REGISTRY_API = "https://cloud.google.com/artifact-registry/docs/access-control#permissions"
PROJECTS_API = "https://cloud.google.com/resource-manager/reference/rest/v1/projects/get"


@dataclass(frozen=True)
class Need:
    """The permissions one type needs, per operation, and the page that names them."""

    create: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    update: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    source: str = ""
    note: str = ""

    def permissions(self, operations: Iterable[str] = OPERATIONS) -> frozenset[str]:
        return frozenset(p for operation in operations for p in getattr(self, operation))


def _crud(prefix: str, source: str, *, create: tuple[str, ...] = (), update: Optional[str] = "update",
          delete: tuple[str, ...] = (), operation: str = "", note: str = "") -> Need:
    """``<prefix>.create/get/update/delete``, with the long-running operation polled on each write."""
    polled = (operation,) if operation else ()
    return Need(create=(f"{prefix}.create", *create, *polled), read=(f"{prefix}.get",),
                update=(f"{prefix}.{update}", *polled) if update else (), delete=(f"{prefix}.delete", *delete, *polled),
                source=source, note=note)


NODE_SERVICE_ACCOUNT = ("iam.serviceAccounts.actAs",)
"""On the nodes' service account (the project's default compute one): ``clusters.create`` checks it (GKE's API
permissions page), and Google's roles page asks the same of whoever sets a node pool's service account."""

RESOURCES: Mapping[str, Need] = {
    "gcp:container/cluster:Cluster": Need(
        create=("container.clusters.create", *NODE_SERVICE_ACCOUNT, "container.operations.get"),
        read=("container.clusters.get",), update=("container.clusters.update", "container.operations.get"),
        delete=("container.clusters.delete", "container.operations.get"), source=GKE_API),
    "gcp:container/nodePool:NodePool": Need(
        create=("container.clusters.update", *NODE_SERVICE_ACCOUNT, "container.operations.get"),
        read=("container.clusters.get",), update=("container.clusters.update", "container.operations.get"),
        delete=("container.clusters.update", "container.operations.get"), source=GKE_API,
        note="node pools are created, changed and deleted through clusters.update"),
    "gcp:compute/network:Network": _crud("compute.networks", COMPUTE_API.format("networks"),
                                         operation="compute.globalOperations.get"),
    "gcp:compute/subnetwork:Subnetwork": _crud("compute.subnetworks", COMPUTE_API.format("subnetworks"),
                                               operation="compute.regionOperations.get"),
    "gcp:compute/firewall:Firewall": _crud(
        "compute.firewalls", COMPUTE_API.format("firewalls"), create=("compute.networks.updatePolicy",),
        delete=("compute.networks.updatePolicy",), operation="compute.globalOperations.get"),
    "gcp:compute/resourcePolicy:ResourcePolicy": _crud(
        "compute.resourcePolicies", COMPUTE_API.format("resourcePolicies"), update=None,
        operation="compute.regionOperations.get", note="tpu7x slices' workload policies; every field replaces it"),
    "gcp:storage/bucket:Bucket": _crud(
        "storage.buckets", STORAGE_API, delete=("storage.objects.list", "storage.objects.delete"),
        note="bucketDeletion force empties it first; retain never deletes it"),
    "gcp:storage/bucketIAMMember:BucketIAMMember": Need(
        create=("storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy"), read=("storage.buckets.getIamPolicy",),
        update=("storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy"),
        delete=("storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy"), source=STORAGE_API),
    "gcp:storage/bucketObject:BucketObject": _crud("storage.objects", STORAGE_API),
    "gcp:artifactregistry/repository:Repository": _crud("artifactregistry.repositories", REGISTRY_API),
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": Need(
        create=("artifactregistry.repositories.getIamPolicy", "artifactregistry.repositories.setIamPolicy"),
        read=("artifactregistry.repositories.getIamPolicy",),
        update=("artifactregistry.repositories.getIamPolicy", "artifactregistry.repositories.setIamPolicy"),
        delete=("artifactregistry.repositories.getIamPolicy", "artifactregistry.repositories.setIamPolicy"),
        source=REGISTRY_API),
    "docker-build:index:Image": Need(
        create=("artifactregistry.repositories.uploadArtifacts", "artifactregistry.repositories.downloadArtifacts"),
        read=("artifactregistry.repositories.downloadArtifacts",),
        update=("artifactregistry.repositories.uploadArtifacts", "artifactregistry.repositories.downloadArtifacts"),
        delete=("artifactregistry.repositories.deleteArtifacts",), source=REGISTRY_API,
        note="a push (and the build cache's pull and push); a refresh reads the tags back; a delete removes them"),
    "pulumi:providers:kubernetes": Need(
        create=("container.clusters.get",), read=("container.clusters.get",), update=("container.clusters.get",),
        delete=("container.clusters.get",), source=GKE_RBAC,
        note="authenticating to the cluster's API server takes container.clusters.get"),
    "pulumi:pulumi:StackReference": Need(
        note="the stack's own last outputs, from Pulumi's state backend (a gs:// backend: that bucket's objects)"),
}
"""Every type the stack registers (or reads) that is not a component or a Kubernetes object."""

INVOKES: Mapping[str, Need] = {
    "gcp:organizations/getProject:getProject": Need(read=("resourcemanager.projects.get",), source=PROJECTS_API),
    "gcp:container/getCluster:getCluster": Need(read=("container.clusters.get",), source=GKE_API),
    "gcp:container/getEngineVersions:getEngineVersions": Need(
        source=GKE_API, note="getServerConfig: Google names no permission for it"),
    "gcp:organizations/getClientConfig:getClientConfig": Need(note="the caller's own access token: no API call"),
}

KUBERNETES_CUSTOM_GROUPS = ("ray.io", "kueue.x-k8s.io", "cloud.google.com")
"""API groups whose objects come from CustomResourceDefinitions: KubeRay's, Kueue's, GKE's ComputeClass."""
KUBERNETES_RESOURCES: Mapping[tuple[str, str], Optional[str]] = {
    # (group, kind): GKE's IAM name for its resource, or None where GKE's IAM names none (RBAC only).
    ("core", "Namespace"): "namespaces",
    ("core", "ServiceAccount"): "serviceAccounts",
    ("core", "Service"): "services",
    ("core", "Secret"): "secrets",
    ("core", "ConfigMap"): "configMaps",
    ("apps", "Deployment"): "deployments",
    ("policy", "PodDisruptionBudget"): "podDisruptionBudgets",
    ("networking.k8s.io", "NetworkPolicy"): "networkPolicies",
    ("rbac.authorization.k8s.io", "ClusterRole"): "clusterRoles",
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): "clusterRoleBindings",
    ("rbac.authorization.k8s.io", "Role"): "roles",
    ("rbac.authorization.k8s.io", "RoleBinding"): "roleBindings",
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): "mutatingWebhookConfigurations",
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): "validatingWebhookConfigurations",
    ("apiregistration.k8s.io", "APIService"): "apiServices",
    ("apiextensions.k8s.io", "CustomResourceDefinition"): "customResourceDefinitions",
    ("resource.k8s.io", "ResourceClaimTemplate"): None,
}
KUEUE_CHART_KINDS = (
    ("apiextensions.k8s.io", "CustomResourceDefinition"), ("core", "Secret"), ("core", "ConfigMap"),
    ("core", "Service"), ("core", "ServiceAccount"), ("apps", "Deployment"), ("policy", "PodDisruptionBudget"),
    ("rbac.authorization.k8s.io", "ClusterRole"), ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "Role"), ("rbac.authorization.k8s.io", "RoleBinding"),
    ("apiregistration.k8s.io", "APIService"), ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
)
"""What Kueue's Helm chart renders with the values the stack sets (kubernetes-sigs/kueue ``charts/kueue/templates``
at v0.19.2: crd/, internalcert/, manager/, rbac/, visibility/, webhook/; cert-manager, Prometheus, KueueViz, the
visibility APF objects and the MutatingAdmissionPolicy are off by default and the stack turns none on)."""
KUEUE_CHART_SOURCE = "https://github.com/kubernetes-sigs/kueue/tree/v0.19.2/charts/kueue/templates"
_VERBS = {"create": "create", "read": "get", "update": "update", "delete": "delete"}
_KUBERNETES_TYPE = re.compile(r"kubernetes:(?P<group>[^/]+)/(?P<version>[^:]+):(?P<kind>\w+)")


def _plural(kind: str) -> str:
    return kind.lower() + ("es" if kind.endswith("s") else "s")


def kubernetes_need(group: str, kind: str) -> Optional[Need]:
    """What a Kubernetes object of ``group``/``kind`` needs through GKE, or None for a kind this table lacks."""
    if group in KUBERNETES_CUSTOM_GROUPS:
        noun: Optional[str] = "thirdPartyObjects"
    elif (group, kind) in KUBERNETES_RESOURCES:
        noun = KUBERNETES_RESOURCES[(group, kind)]
    else:
        return None
    if noun is None:
        verbs = {op: (f"{RBAC}{group}/{_plural(kind)}.{verb}",) for op, verb in _VERBS.items()}
        return Need(**verbs, source=GKE_ROLES, note="no IAM permission names it: RBAC, or roles/container.admin")
    return Need(**{op: (f"container.{noun}.{verb}",) for op, verb in _VERBS.items()}, source=GKE_API)


def _chart_need() -> Need:
    needs = [kubernetes_need(group, kind) for group, kind in KUEUE_CHART_KINDS]
    return Need(**{op: tuple(sorted({p for need in needs for p in getattr(need, op)})) for op in OPERATIONS},
                source=KUEUE_CHART_SOURCE, note="every object Kueue's chart renders")


def need_of(type_: str) -> Optional[Need]:
    """What a registered (or read) type needs; None when the table has no entry for it."""
    if type_.startswith("gke-ray-tpu:index:"):
        return Need(note="a component: its children are counted, it calls no API")
    if type_ == "kubernetes:helm.sh/v4:Chart":
        return _chart_need()
    match = _KUBERNETES_TYPE.fullmatch(type_)
    if match and type_ not in RESOURCES:
        return kubernetes_need(match["group"], match["kind"])
    return RESOURCES.get(type_)


@dataclass(frozen=True)
class Role:
    """A predefined role, what the stack takes it for, and the permissions of it the stack uses."""

    name: str
    purpose: str
    when: str
    """Which stacks need it."""
    grants: frozenset[str]
    scope: str = "the project"
    kubernetes_objects: bool = False
    """Whether it grants every Kubernetes object's RBAC rule too (GKE's "full management of ... Kubernetes API
    objects"): the ``rbac:`` needs."""

    def grants_permission(self, permission: str) -> bool:
        return permission in self.grants or (self.kubernetes_objects and permission.startswith(RBAC))


def _grants(*names: str) -> frozenset[str]:
    return frozenset(names)


_OPERATIONS_GET = ("compute.globalOperations.get", "compute.regionOperations.get")
ROLES: tuple[Role, ...] = (
    Role("roles/container.admin", "the GKE cluster, its node pools and every Kubernetes object", "every stack", _grants(
        "container.clusters.create", "container.clusters.get", "container.clusters.update", "container.clusters.delete",
        "container.operations.get", "resourcemanager.projects.get",
        *(f"container.{noun}.{verb}" for noun in sorted({n for n in KUBERNETES_RESOURCES.values() if n}
                                                        | {"thirdPartyObjects"})
          for verb in ("create", "get", "update", "delete"))), kubernetes_objects=True),
    Role("roles/iam.serviceAccountUser", "running the nodes as the project's default compute service account",
         "a stack that creates its cluster or node pools", _grants("iam.serviceAccounts.actAs", "resourcemanager.projects.get"),
         scope="PROJECT_NUMBER-compute@developer.gserviceaccount.com"),
    Role("roles/compute.networkAdmin", "the DCN networks and their subnets", "a Standard stack with DCN networks",
         _grants(
        "compute.networks.create", "compute.networks.get", "compute.networks.update", "compute.networks.delete",
        "compute.networks.updatePolicy", "compute.subnetworks.create", "compute.subnetworks.get",
        "compute.subnetworks.update", "compute.subnetworks.delete", "compute.firewalls.get", *_OPERATIONS_GET,
        "resourcemanager.projects.get")),
    Role("roles/compute.securityAdmin", "the DCN networks' firewall rules", "a Standard stack with DCN networks",
         _grants(
        "compute.firewalls.create", "compute.firewalls.get", "compute.firewalls.update", "compute.firewalls.delete",
        "compute.networks.updatePolicy", "compute.networks.get", *_OPERATIONS_GET, "resourcemanager.projects.get")),
    Role("roles/compute.storageAdmin", "the slices' workload policies (the smallest predefined role with resource "
         "policies)", "a tpu7x stack", _grants("compute.resourcePolicies.create", "compute.resourcePolicies.get",
                              "compute.resourcePolicies.delete", *_OPERATIONS_GET, "resourcemanager.projects.get")),
    Role("roles/storage.admin", "the checkpoint bucket, its IAM members and the runs' code archives", "every stack",
         _grants(
        "storage.buckets.create", "storage.buckets.get", "storage.buckets.update", "storage.buckets.delete",
        "storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy", "storage.objects.create",
        "storage.objects.get", "storage.objects.update", "storage.objects.delete", "storage.objects.list",
        "resourcemanager.projects.get")),
    Role("roles/artifactregistry.repoAdmin", "pushing the workers' image and its build cache, deleting its tags",
         "`existingImageRepository`", _grants(
             "artifactregistry.repositories.uploadArtifacts", "artifactregistry.repositories.downloadArtifacts",
             "artifactregistry.repositories.deleteArtifacts", "artifactregistry.repositories.get",
             "resourcemanager.projects.get"), scope="the repository"),
    Role("roles/artifactregistry.admin", "the workers' image repository, the nodes' right to read it, the pushes",
         "`buildImage` without `existingImageRepository`", _grants("artifactregistry.repositories.create", "artifactregistry.repositories.get",
                 "artifactregistry.repositories.update", "artifactregistry.repositories.delete",
                 "artifactregistry.repositories.getIamPolicy", "artifactregistry.repositories.setIamPolicy",
                 "artifactregistry.repositories.uploadArtifacts", "artifactregistry.repositories.downloadArtifacts",
                 "artifactregistry.repositories.deleteArtifacts", "resourcemanager.projects.get")),
)
"""The predefined roles the docs name, in the order they are chosen; each ``grants`` is the part of the role (Google's
``roles/<name>`` reference page) that the stack's needs touch, not the whole role."""

TUTORIAL_ROLES = ("roles/container.admin", "roles/iam.serviceAccountAdmin", "roles/compute.networkAdmin",
                  "roles/storage.admin")
"""What docs/deploy.md named before the roles were derived from the resources (the tutorial's two plus two)."""


def needs(types: Iterable[str], reads: Iterable[str] = (), invokes: Iterable[str] = ()) -> dict[str, frozenset[str]]:
    """{type or invoke: the permissions it needs}: every operation of what is registered, the read of what is read,
    the call of each invoke. A KeyError names a type or invoke the table has no entry for."""
    found: dict[str, set[str]] = {}
    for names, operations, lookup in ((types, OPERATIONS, need_of), (reads, ("read",), need_of),
                                      (invokes, ("read",), INVOKES.get)):
        for name in names:
            need = lookup(name)
            if need is None:
                raise KeyError(name)
            found.setdefault(name, set()).update(need.permissions(operations))
    return {name: frozenset(permissions) for name, permissions in found.items()}


def uncovered(required: Mapping[str, frozenset[str]], roles: Iterable[Role]) -> list[tuple[str, str]]:
    """(type, permission) pairs no role of ``roles`` grants."""
    roles = list(roles)
    return sorted((name, p) for name, permissions in required.items() for p in permissions
                  if not any(role.grants_permission(p) for role in roles))


def roles_for(required: Mapping[str, frozenset[str]], roles: Iterable[Role] = ROLES) -> list[Role]:
    """The roles, in ``roles``' order, that together grant every permission ``required``: for each permission the first
    role that grants it, then without a role whose chosen permissions others of them grant too."""
    roles = list(roles)
    chosen: dict[str, set[str]] = {}
    for permission in sorted({p for permissions in required.values() for p in permissions}):
        role = next((r for r in roles if r.grants_permission(permission)), None)
        if role is not None:
            chosen.setdefault(role.name, set()).add(permission)
    picked = [r for r in roles if r.name in chosen]
    for role in list(picked):
        others = [r for r in picked if r is not role]
        if all(any(o.grants_permission(p) for o in others) for p in chosen[role.name]):
            picked.remove(role)
    return picked
