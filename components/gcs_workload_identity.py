"""GcsWorkloadIdentity: the checkpoint bucket and the Kubernetes identity that may use it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components._options import child_options
from components.errors import ConfigError
from components.stack_config import BUCKET_DELETION_POLICIES, check_bucket_name

BUCKET_ROLE = "roles/storage.objectUser"
"""Read, write, list and delete objects; no bucket or IAM administration."""


@dataclass
class GcsWorkloadIdentityArgs:
    """Inputs of :class:`GcsWorkloadIdentity`."""

    bucket_name: str
    """Globally unique GCS bucket name for checkpoints and logs."""
    location: str
    """Bucket location: the slices' region, so checkpoint traffic stays regional."""
    project: str
    """Project ID that owns the bucket and the Workload Identity pool ``<project>.svc.id.goog``."""
    project_number: pulumi.Input[str]
    """Numeric project number used in the ``principal://`` member."""
    namespace: str = "default"
    """Kubernetes namespace of the service account."""
    ksa_name: str = "ray-tpu-ksa"
    """Kubernetes service account the Ray pods run as."""
    bucket_deletion: str = "retain"
    """What ``pulumi destroy`` does to the bucket: ``retain`` (default: drop it from the
    stack, keep it and its checkpoints), ``delete-empty`` (delete; GCS refuses while
    objects remain, so destroy stops instead of losing data) or ``force`` (delete it
    with every object in it)."""


def workload_identity_member(project: str, project_number: str, namespace: str, ksa_name: str) -> str:
    """The IAM principal of a Kubernetes service account under GKE Workload Identity Federation."""
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{project}.svc.id.goog/subject/ns/{namespace}/sa/{ksa_name}"
    )


class GcsWorkloadIdentity(pulumi.ComponentResource):
    """A private, uniform-access STANDARD bucket, a KSA, and a bucket-scoped role for the KSA.

    The binding is on the bucket, not the project, and names the KSA directly
    as a ``principal://`` member, so no Google service account or key exists.
    ``principal://`` members only work on buckets with uniform bucket-level
    access, which is also what keeps ACLs from reopening the bucket.
    """

    bucket: gcp.storage.Bucket
    service_account: k8s.core.v1.ServiceAccount
    binding: gcp.storage.BucketIAMMember

    def __init__(
        self,
        name: str,
        args: GcsWorkloadIdentityArgs,
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        check_bucket_name(args.bucket_name, key=f"{name}.bucket_name")
        if args.bucket_deletion not in BUCKET_DELETION_POLICIES:
            raise ConfigError(
                f"{name}.bucket_deletion", args.bucket_deletion, f"one of {', '.join(BUCKET_DELETION_POLICIES)}"
            )
        super().__init__("gke-ray-tpu:index:GcsWorkloadIdentity", name, None, opts)

        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=args.bucket_name,
            project=args.project,
            location=args.location,
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=args.bucket_deletion == "force",
            opts=child_options(self, opts, retain_on_delete=args.bucket_deletion == "retain"),
        )
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=args.ksa_name, namespace=args.namespace),
            opts=child_options(self, opts),
        )
        self.member = pulumi.Output.from_input(args.project_number).apply(
            lambda number: workload_identity_member(args.project, number, args.namespace, args.ksa_name)
        )
        self.binding = gcp.storage.BucketIAMMember(
            f"{name}-object-user",
            bucket=self.bucket.name,
            role=BUCKET_ROLE,
            member=self.member,
            opts=child_options(self, opts),
        )
        self.bucket_name = self.bucket.name
        self.ksa_name = self.service_account.metadata.name
        self.register_outputs({"bucketName": self.bucket_name, "ksaName": self.ksa_name, "member": self.member})
