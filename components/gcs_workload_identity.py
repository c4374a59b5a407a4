"""GcsWorkloadIdentity: the checkpoint bucket and the Kubernetes identity that may use it."""

from typing import NotRequired, Optional, TypedDict

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from gke_ray_tpu.components._options import child_options
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.naming import DNS_LABEL, DNS_SUBDOMAIN, check_bucket_name

BUCKET_ROLE = "roles/storage.objectUser"
"""Read, write, list and delete objects (and, on a hierarchical-namespace bucket, folders); no bucket or IAM administration."""
BUCKET_READER_ROLE = "roles/storage.legacyBucketReader"
"""``storage.buckets.get`` (and ``storage.objects.list``), which objectUser lacks: MaxText reads the bucket's
metadata before it writes to a ``gs://`` base (``maxtext.utils.gcs_utils.mkdir_and_check_permissions``)
and refuses a bucket it cannot read. A legacy role, so grantable on a bucket only."""
BUCKET_DELETION_POLICIES = ("retain", "delete-empty", "force")
DEFAULT_BUCKET_DELETION = "retain"
DEFAULT_HIERARCHICAL_NAMESPACE = False
"""Flat: the namespace the checkpoint drills run against. Checkpoints go to ``gs://`` with Orbax's commit
markers, not through GCS FUSE, so a hierarchical namespace's atomic folder rename gains them nothing,
and the ``/data`` mount holds only write-once files (code archives, compilation-cache entries). On a
hierarchical-namespace bucket Orbax (0.12.4-0.12.8) lists steps through folder prefixes and removes
deleted steps' folders through the Storage Control API, paths no test here runs: the Cloud Storage
emulator has no folders."""
DEFAULT_NAMESPACE = "default"
DEFAULT_KSA_NAME = "ray-tpu-ksa"


class GcsWorkloadIdentityArgs(TypedDict):
    """Inputs of GcsWorkloadIdentity."""

    bucket_name: str
    """Globally unique Cloud Storage bucket name for checkpoints and logs (Google's bucket naming rules; no dots)."""
    location: str
    """Bucket location: the slices' region, so checkpoint traffic stays regional."""
    project: str
    """Project ID that owns the bucket and the Workload Identity pool <project>.svc.id.goog."""
    project_number: pulumi.Input[str]
    """Numeric project number, used in the principal:// member."""
    namespace: NotRequired[str]
    """Kubernetes namespace of the service account (it must exist). Default: default."""
    ksa_name: NotRequired[str]
    """Kubernetes service account the Ray pods run as. Default: ray-tpu-ksa."""
    hierarchical_namespace: NotRequired[bool]
    """Create the bucket with a hierarchical namespace (atomic folder renames for what goes through GCS FUSE; Orbax then lists and deletes checkpoint steps through folders, which is not tested here). Only at creation: Cloud Storage cannot convert a bucket, so an existing bucket keeps its namespace whatever this says (see hierarchical_namespace_enabled). Default: false (flat, the namespace the checkpoint drills run against)."""
    bucket_deletion: NotRequired[str]
    """What pulumi destroy does to the bucket: retain (the default: drop it from the stack, keep it and its checkpoints), delete-empty (delete; Cloud Storage refuses while objects remain, so destroy stops instead of losing data) or force (delete it with every object)."""


class GcsWorkloadIdentityRef(TypedDict):
    """What Ray pods use of a GcsWorkloadIdentity: its bucket, and the service account bound to it in its namespace. From Python, pass the GcsWorkloadIdentity itself. The provider cannot pass a component between languages (a reference arrives as its URN only), so other languages set these fields: bucketName and ksaName from its outputs, so that the pods wait for the bucket, the service account and its binding."""

    bucket_name: pulumi.Input[str]
    """The checkpoint bucket (GcsWorkloadIdentity's bucketName). A MaxTextRun needs it as a plain name: its job's command names the bucket."""
    ksa_name: pulumi.Input[str]
    """The Kubernetes service account that may use the bucket (GcsWorkloadIdentity's ksaName): the pods wait for the bucket, the account and its bindings through it."""
    namespace: str
    """The service account's namespace: the Ray pods run there."""


MAX_SUBJECT = 127
"""Workload Identity Federation keeps a principal's google.subject to 127 characters."""


def check_subject(namespace: str, ksa_name: str, key: str) -> None:
    """The KSA's principal:// subject, ``ns/<namespace>/sa/<ksa>``, must fit Workload Identity Federation."""
    subject = f"ns/{namespace}/sa/{ksa_name}"
    if len(subject) > MAX_SUBJECT:
        raise ConfigError(
            key, ksa_name,
            f"a name whose Workload Identity subject {subject[:40]}... ({len(subject)} characters) "
            f"is at most {MAX_SUBJECT} characters",
        )


def check_ksa_name(ksa_name: object, key: str) -> str:
    """A service account this component can create: the API refuses to create one that exists."""
    name = DNS_SUBDOMAIN.check(ksa_name, key)
    if name == "default":
        raise ConfigError(key, name, "a name of its own: every namespace already has a `default` service account")
    return name


def check_args(args: GcsWorkloadIdentityArgs, prefix: str = "GcsWorkloadIdentityArgs.") -> None:
    check_bucket_name(args["bucket_name"], f"{prefix}bucket_name")
    namespace = DNS_LABEL.check(args.get("namespace", DEFAULT_NAMESPACE), f"{prefix}namespace")
    ksa_name = check_ksa_name(args.get("ksa_name", DEFAULT_KSA_NAME), f"{prefix}ksa_name")
    check_subject(namespace, ksa_name, f"{prefix}ksa_name")
    deletion = args.get("bucket_deletion", DEFAULT_BUCKET_DELETION)
    if deletion not in BUCKET_DELETION_POLICIES:
        raise ConfigError(f"{prefix}bucket_deletion", deletion, f"one of {', '.join(BUCKET_DELETION_POLICIES)}")
    hns = args.get("hierarchical_namespace", DEFAULT_HIERARCHICAL_NAMESPACE)
    if not isinstance(hns, bool):
        raise ConfigError(f"{prefix}hierarchical_namespace", hns, "true or false")


def workload_identity_member(project: str, project_number: str, namespace: str, ksa_name: str) -> str:
    """The IAM principal of a Kubernetes service account under GKE Workload Identity Federation."""
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{project}.svc.id.goog/subject/ns/{namespace}/sa/{ksa_name}"
    )


class GcsWorkloadIdentity(pulumi.ComponentResource):
    """A private, uniform-access STANDARD bucket, a KSA, and bucket-scoped roles for the KSA.

    The bindings are on the bucket, not the project, and name the KSA directly
    as a principal:// member, so no Google service account or key exists.
    principal:// members only work on buckets with uniform bucket-level
    access, which is also what keeps ACLs from reopening the bucket (and what
    a hierarchical namespace requires). Needs a Kubernetes provider for the
    cluster (opts providers). RayTpuCluster takes it as workload_identity.

    The namespace is fixed when the bucket is created: Cloud Storage cannot
    convert a bucket, and the provider would replace it. A replacement of a
    named bucket creates the new one first, which fails on the taken name, and
    nothing here may delete checkpoints, so the setting never reaches an
    existing bucket (it is ignored on update); hierarchical_namespace_enabled
    says what the bucket has, and a mismatch is a warning.
    """

    bucket_name: pulumi.Output[str]
    """The bucket's name."""
    ksa_name: pulumi.Output[str]
    """The Kubernetes service account's name, known once it and its bucket binding exist."""
    member: pulumi.Output[str]
    """The principal:// member granted roles/storage.objectUser and roles/storage.legacyBucketReader on the bucket."""
    hierarchical_namespace_enabled: pulumi.Output[bool]
    """Whether the bucket has a hierarchical namespace (what it was created with)."""

    def __init__(self, name: str, args: GcsWorkloadIdentityArgs, opts: Optional[pulumi.ResourceOptions] = None):
        check_args(args)
        super().__init__("gke-ray-tpu:index:GcsWorkloadIdentity", name, None, opts)
        namespace = args.get("namespace", DEFAULT_NAMESPACE)
        ksa_name = args.get("ksa_name", DEFAULT_KSA_NAME)
        deletion = args.get("bucket_deletion", DEFAULT_BUCKET_DELETION)
        hns = args.get("hierarchical_namespace", DEFAULT_HIERARCHICAL_NAMESPACE)

        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=args["bucket_name"],
            project=args["project"],
            location=args["location"],
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            hierarchical_namespace=gcp.storage.BucketHierarchicalNamespaceArgs(enabled=hns),
            force_destroy=deletion == "force",
            opts=child_options(
                self, opts, retain_on_delete=deletion == "retain", ignore_changes=["hierarchicalNamespace"]
            ),
        )
        self.hierarchical_namespace_enabled = self.bucket.hierarchical_namespace.apply(
            lambda actual: _warn_on_namespace(args["bucket_name"], hns, bool(actual and actual.enabled))
        )
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=ksa_name, namespace=namespace),
            opts=child_options(self, opts),
        )
        self.member = pulumi.Output.from_input(args["project_number"]).apply(
            lambda number: workload_identity_member(args["project"], number, namespace, ksa_name)
        )
        self.bindings = [
            gcp.storage.BucketIAMMember(
                f"{name}-{suffix}", bucket=self.bucket.name, role=role, member=self.member, opts=child_options(self, opts)
            )
            for suffix, role in (("object-user", BUCKET_ROLE), ("bucket-reader", BUCKET_READER_ROLE))
        ]
        self.bucket_name = self.bucket.name
        # Tied to the bindings too: a pod running as the account before they exist cannot read the bucket.
        self.ksa_name = pulumi.Output.all(
            self.service_account.metadata.name, *(binding.member for binding in self.bindings)
        ).apply(lambda v: v[0])
        # The name as given, not the bucket's output: a run's command names the bucket when the program runs.
        # Pods still wait for the bucket, through ksa_name.
        self.ref = GcsWorkloadIdentityRef(bucket_name=args["bucket_name"], ksa_name=self.ksa_name, namespace=namespace)
        self.register_outputs({
            "bucketName": self.bucket_name, "ksaName": self.ksa_name, "member": self.member,
            "hierarchicalNamespaceEnabled": self.hierarchical_namespace_enabled,
        })


def _warn_on_namespace(bucket: str, asked: bool, actual: bool) -> bool:
    """An existing bucket keeps its namespace: say so when the setting asks for the other one."""
    if asked != actual:
        have, want = ("flat", "hierarchical") if asked else ("hierarchical", "flat")
        pulumi.log.warn(
            f"bucket {bucket} has a {have} namespace and keeps it: Cloud Storage cannot convert a bucket, "
            f"so the {want} namespace asked for applies only to a new bucket. Runs write gs:// with Orbax's commit "
            "markers on either; on a hierarchical one Orbax also lists and deletes steps through folders, which "
            "is not tested here. To move to a new bucket, see docs/elastic.md, "
            "'Moving checkpoints to a new bucket'"
        )
    return actual
