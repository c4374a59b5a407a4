"""Google Cloud's and Kubernetes' naming rules, as the APIs enforce them.

Every name the stack creates, or derives from a config value, must pass the
rule of the API that receives it; otherwise ``pulumi up`` fails half-way (or,
for a RayCluster, KubeRay silently refuses to reconcile it). Sources:

* GKE clusters and node pools: the API's error text, ``Must be a match of regex
  '(?:[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)' ... no longer than 40 characters``
  (quoted in pulumi/pulumi-gcp#1510 and hashicorp/terraform-provider-google#3411).
* Project IDs: https://cloud.google.com/resource-manager/docs/creating-managing-projects
  (6-30 characters, lowercase letters, digits and hyphens, starting with a letter,
  not ending with a hyphen).
* Compute Engine networks, subnetworks, firewalls, resource policies,
  reservations: https://cloud.google.com/compute/docs/naming-resources (RFC 1035, 1-63).
* Cloud Storage buckets: https://cloud.google.com/storage/docs/naming-buckets.
* Kubernetes: ``k8s.io/apimachinery/pkg/util/validation`` (DNS-1123 label 63,
  subdomain 253, DNS-1035 label 63); namespaces are labels, Services DNS-1035
  labels, ServiceAccounts and custom resources subdomains.
* KubeRay >= 1.4 (``ray-operator/controllers/ray/utils/constant.go``,
  ``validation.go``): a RayCluster name is a DNS-1035 label of at most 53
  characters (63 minus ``-serve-svc``), checked by the controller, not at
  admission. The GKE TPU webhook (``ai-on-gke/kuberay-tpu-webhook``) cuts the
  pod subdomain ``<cluster>-headless`` to its last 50 characters while KubeRay
  names that Service in full, so a multi-host TPU RayCluster name must stay
  within 41 characters or the TPU hosts cannot resolve each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gke_ray_tpu.core.errors import ConfigError


@dataclass(frozen=True)
class NameRule:
    """One API's rule for a name: a pattern and a maximum length."""

    what: str
    """What the name is, e.g. "a GKE cluster name"."""
    pattern: str
    max_length: int
    description: str
    """The rule in words, for error messages."""

    def matches(self, name: object) -> bool:
        return isinstance(name, str) and len(name) <= self.max_length and re.fullmatch(self.pattern, name) is not None

    def check(self, name: object, key: str) -> str:
        """``name`` if it passes, else a ConfigError naming ``key``."""
        if not self.matches(name):
            raise ConfigError(key, name, f"{self.what}: {self.description}")
        return name  # type: ignore[return-value]

    def check_derived(self, derived: str, value: object, key: str, via: str) -> None:
        """A name derived from the config value ``value`` must pass this rule too.

        ``via`` says how it is derived, e.g. "the DCN network name <clusterName>-net-2".
        """
        if not self.matches(derived):
            raise ConfigError(
                key, value, f"a value whose {via} ({derived!r}) is {self.what}: {self.description}"
            )


_LOWER_START_END = "starting with a letter and ending with a letter or digit"

GKE_NAME = NameRule(
    "a GKE cluster or node pool name",
    r"[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?",
    40,
    f"1-40 lowercase letters, digits or '-', {_LOWER_START_END}",
)
COMPUTE_NAME = NameRule(
    "a Compute Engine resource name",
    r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?",
    63,
    f"1-63 lowercase letters, digits or '-', {_LOWER_START_END} (RFC 1035)",
)
PROJECT_ID = NameRule(
    "a Google Cloud project ID",
    r"[a-z][-a-z0-9]{4,28}[a-z0-9]",
    30,
    "6-30 lowercase letters, digits or '-', starting with a letter and not ending with '-'",
)
REGION = NameRule("a Google Cloud region", r"[a-z]+(?:-[a-z]+)+[0-9]+", 63, "such as us-east5 or europe-west4")
ZONE = NameRule("a Google Cloud zone", r"[a-z]+(?:-[a-z]+)+[0-9]+-[a-z]", 63, "a region and a letter, such as us-east5-b")
DNS_LABEL = NameRule(
    "a Kubernetes DNS-1123 label",
    r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?",
    63,
    "1-63 lowercase letters, digits or '-', starting and ending with a letter or digit",
)
DNS_SUBDOMAIN = NameRule(
    "a Kubernetes DNS-1123 subdomain",
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*",
    253,
    "at most 253 characters of dot-separated DNS-1123 labels",
)
RAY_CLUSTER_NAME = NameRule(
    "a RayCluster name",
    r"[a-z](?:[-a-z0-9]{0,51}[a-z0-9])?",
    53,
    f"a DNS-1035 label of 1-53 characters, {_LOWER_START_END} (KubeRay: 63 minus '-serve-svc')",
)
RAY_TPU_CLUSTER_NAME = NameRule(
    "a multi-host TPU RayCluster name",
    r"[a-z](?:[-a-z0-9]{0,39}[a-z0-9])?",
    41,
    f"a DNS-1035 label of 1-41 characters, {_LOWER_START_END} (the GKE TPU webhook cuts "
    "'<name>-headless' to 50 characters, so a longer name breaks the TPU hosts' DNS)",
)

RAY_JOB_NAME = NameRule(
    "a RayJob name",
    r"[a-z](?:[-a-z0-9]{0,45}[a-z0-9])?",
    47,
    f"a DNS-1035 label of 1-47 characters, {_LOWER_START_END} (KubeRay: 53 minus '-xxxxx')",
)

BUCKET_NAME_EXPECTED = (
    "a Cloud Storage bucket name: 3-63 lowercase letters, digits, '-' or '_', starting and ending "
    "with a letter or digit, not starting with 'goog' and not containing 'google' or a close "
    "misspelling of it; no dots (a dotted name is a domain name that needs domain verification)"
)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]")
# "Close misspellings, such as g00gle": the common look-alike substitutions.
_LOOKALIKES = str.maketrans({"0": "o", "1": "l", "i": "l", "3": "e"})


def check_bucket_name(name: object, key: str) -> str:
    """Google's bucket naming rules (https://cloud.google.com/storage/docs/naming-buckets).

    Dotted names are refused rather than half-checked: Google treats them as
    domain names, which only a verified owner of the domain may create.
    """
    if not isinstance(name, str) or not _BUCKET.fullmatch(name) or name.startswith("goog"):
        raise ConfigError(key, name, BUCKET_NAME_EXPECTED)
    if "google" in name.translate(_LOOKALIKES).replace("_", "").replace("-", ""):
        raise ConfigError(key, name, BUCKET_NAME_EXPECTED)
    return name

