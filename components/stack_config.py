"""Stack configuration: read once from ``Pulumi.<stack>.yaml``, validated once, then plain data.

Every rule here runs before ``__main__.py`` registers a single resource, so a
bad value fails ``pulumi preview`` with a :class:`~components.errors.ConfigError`
that names the key, the value and what would be valid. The module does not
import Pulumi: :func:`parse_stack_config` takes a plain ``{key: str}`` mapping,
which is how Pulumi hands config to a program, and is what the property-based
tests feed it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Mapping, Optional

from components.errors import ConfigError
from components.tpu_catalogue import SliceShape, slice_shape

NAMESPACE = "gke-ray-tpu"

# GKE managed DRANET minimums (GKE "allocate network resources with DRA" page).
DRANET_MIN_VERSION = {
    "standard": "1.34.1-gke.1829001",
    "autopilot": "1.35.2-gke.1842000",
}
TUTORIAL_DCN_CIDRS = ("10.50.0.0/16", "10.60.0.0/16")
RELEASE_CHANNELS = ("UNSPECIFIED", "RAPID", "REGULAR", "STABLE", "EXTENDED")
CLUSTER_MODES = ("standard", "autopilot")
BUCKET_DELETION_POLICIES = ("retain", "delete-empty", "force")
# The tutorial's image: the only TPU Ray image this stack is known to work with.
# It is a moving tag (pulled on every start); production stacks should set
# rayImage to a release or digest they have tested.
DEFAULT_RAY_IMAGE = "rayproject/ray:nightly-py312-tpu"

# Keys this program reads, with what each accepts. Used to reject typos.
KNOWN_KEYS = {
    "clusterName": "a GKE cluster name",
    "clusterMode": "standard | autopilot",
    "clusterVersion": "a GKE version like 1.35.2-gke.1842000",
    "releaseChannel": " | ".join(RELEASE_CHANNELS),
    "deletionProtection": "true | false",
    "existingClusterName": "the name of a cluster to reuse instead of creating one",
    "existingClusterLocation": "the zone or region of existingClusterName",
    "cpuMachineType": "a machine type for the Ray head pool",
    "cpuNodeCount": "an integer >= 1",
    "enableMultiNetworking": "true | false",
    "dcnCidrs": "a JSON list of IPv4 CIDRs, one per DCN network",
    "tpuGeneration": "a TPU generation",
    "tpuTopology": "a TPU topology",
    "numSlices": "an integer >= 1",
    "elasticMinSlices": "an integer between 1 and numSlices",
    "spot": "true | false",
    "reservation": "a reservation name",
    "bucketName": "a GCS bucket name",
    "bucketDeletion": " | ".join(BUCKET_DELETION_POLICIES),
    "namespace": "a Kubernetes namespace",
    "ksaName": "a Kubernetes service account name",
    "rayClusterName": "a RayCluster name",
    "rayImage": "a container image",
    "megascalePort": "a TCP port",
    "projectNumber": "the numeric project number (skips the lookup)",
    "plannedPreset": "the training preset `pulumi preview` checks against the slices",
    "plannedOverrides": 'a JSON object of MaxText keys, e.g. {"per_device_batch_size": 2}',
}

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_GKE_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)-gke\.(\d+)$")
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class StackConfig:
    """The validated stack: everything ``__main__.py`` needs, already checked."""

    project: str
    region: str
    zone: str
    cluster_name: str
    cluster_mode: str
    cluster_version: str
    release_channel: str
    deletion_protection: bool
    existing_cluster_name: Optional[str]
    existing_cluster_location: Optional[str]
    cpu_machine_type: str
    cpu_node_count: int
    enable_multi_networking: bool
    dcn_cidrs: tuple[str, ...]
    shape: SliceShape
    num_slices: int
    elastic_min_slices: int
    spot: bool
    reservation: Optional[str]
    bucket_name: str
    bucket_deletion: str
    namespace: str
    ksa_name: str
    ray_cluster_name: str
    ray_image: str
    megascale_port: int
    project_number: Optional[str]
    planned_preset: Optional[str]
    """Explicitly chosen preset: its sharding mismatches fail preview (else they only warn)."""
    planned_overrides: dict[str, object]

    @property
    def autopilot(self) -> bool:
        return self.cluster_mode == "autopilot"

    @property
    def cluster_location(self) -> str:
        """Autopilot clusters are regional; the tutorial's Standard cluster is zonal."""
        if self.existing_cluster_name:
            return self.existing_cluster_location or self.zone
        return self.region if self.autopilot else self.zone

    @property
    def dcn_interfaces(self) -> int:
        return len(self.dcn_cidrs)


def _key(name: str) -> str:
    return f"{NAMESPACE}:{name}"


class _Reader:
    """Typed access to the raw string config, with errors that name the full key."""

    def __init__(self, raw: Mapping[str, str]):
        self._raw = raw

    def str(self, name: str, default: Optional[str] = None) -> Optional[str]:
        value = self._raw.get(_key(name))
        return default if value is None or value == "" else value

    def required(self, key: str) -> str:
        """A key that must be set; ``key`` is the full key (``gcp:project``, ``gke-ray-tpu:bucketName``)."""
        value = self._raw.get(key)
        if not value:
            raise ConfigError(key, value, "a value (set it with `pulumi config set`)")
        return value

    def bool(self, name: str, default: bool) -> bool:
        value = self.str(name)
        if value is None:
            return default
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(_key(name), value, "true or false")

    def int(self, name: str, default: int, minimum: int, maximum: int = 2**31) -> int:
        value = self.str(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(_key(name), value, f"an integer between {minimum} and {maximum}") from None
        if not minimum <= number <= maximum:
            raise ConfigError(_key(name), number, f"an integer between {minimum} and {maximum}")
        return number

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.str(name, default)
        if value not in choices:
            raise ConfigError(_key(name), value, f"one of {', '.join(choices)}")
        return value

    def matching(self, name: str, default: Optional[str], pattern: re.Pattern, expected: str) -> Optional[str]:
        value = self.str(name, default)
        if value is not None and not pattern.match(value):
            raise ConfigError(_key(name), value, expected)
        return value

    def dns_label(self, name: str, default: Optional[str]) -> Optional[str]:
        value = self.str(name, default)
        if value is not None and not _DNS_LABEL.match(value):
            raise ConfigError(
                _key(name), value, "a lowercase DNS label (a-z, 0-9, '-', starting with a letter, at most 63 chars)"
            )
        return value


def parse_gke_version(version: str, key: str) -> tuple[int, int, int, int]:
    match = _GKE_VERSION.match(version)
    if not match:
        raise ConfigError(key, version, "a GKE version like 1.35.2-gke.1842000")
    major, minor, patch, gke = (int(group) for group in match.groups())
    return major, minor, patch, gke


def check_dranet_version(mode: str, version: str, key: str = _key("clusterVersion")) -> None:
    """GKE-managed DRANET exists only from a minimum version, which differs per mode."""
    minimum = DRANET_MIN_VERSION[mode]
    if parse_gke_version(version, key) < parse_gke_version(minimum, key):
        raise ConfigError(key, version, f"{minimum} or later: GKE-managed DRANET needs it in {mode} mode")


def parse_dcn_cidrs(value: Optional[str], key: str = _key("dcnCidrs")) -> Optional[tuple[str, ...]]:
    """Parse the JSON list of DCN subnet ranges from config; None when unset."""
    if value is None:
        return None
    try:
        cidrs = json.loads(value)
    except json.JSONDecodeError:
        raise ConfigError(key, value, 'a JSON list such as ["10.50.0.0/16", "10.60.0.0/16"]') from None
    return check_dcn_cidrs(cidrs, key)


def check_dcn_cidrs(cidrs: object, key: str) -> tuple[str, ...]:
    """DCN subnet ranges must be valid, private, subnet-sized and disjoint."""
    if not isinstance(cidrs, (list, tuple)) or not all(isinstance(c, str) for c in cidrs):
        raise ConfigError(key, cidrs, 'a list of strings such as ["10.50.0.0/16", "10.60.0.0/16"]')
    networks: list[ipaddress.IPv4Network] = []
    for cidr in cidrs:
        try:
            network = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError as error:
            raise ConfigError(key, cidr, f"an IPv4 network in CIDR form ({error})") from None
        if not network.is_private or not 8 <= network.prefixlen <= 29:
            raise ConfigError(key, cidr, "a private IPv4 range with a prefix between /8 and /29")
        for other in networks:
            if network.overlaps(other):
                raise ConfigError(key, cidr, f"a range that does not overlap {other}")
        networks.append(network)
    return tuple(str(n) for n in networks)


def check_bucket_name(name: str, key: str = _key("bucketName")) -> str:
    """GCS naming rules (the ones a stack can hit): 3-63 chars, lowercase, no IP, no 'goog'."""
    expected = "3-63 chars of a-z, 0-9, '-', '_', '.', starting and ending with a letter or digit, not an IP address, not starting with 'goog'"
    if not _BUCKET.match(name) or name.startswith("goog") or ".." in name:
        raise ConfigError(key, name, expected)
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name
    raise ConfigError(key, name, expected)


def parse_stack_config(raw: Mapping[str, str]) -> StackConfig:
    """Validate the raw config of one stack. Raises ConfigError on the first bad key."""
    unknown = sorted(
        k for k in raw if k.startswith(NAMESPACE + ":") and k.split(":", 1)[1] not in KNOWN_KEYS
    )
    if unknown:
        raise ConfigError(unknown[0], raw[unknown[0]], f"a known key: {', '.join(sorted(KNOWN_KEYS))}")
    read = _Reader(raw)

    project = read.required("gcp:project")
    region = read.required("gcp:region")
    zone = raw.get("gcp:zone") or f"{region}-b"
    if not zone.startswith(region + "-"):
        raise ConfigError("gcp:zone", zone, f"a zone of gcp:region {region} (like {region}-b)")

    mode = read.choice("clusterMode", "standard", CLUSTER_MODES)
    shape = slice_shape(
        read.str("tpuGeneration", "v6e"),
        read.str("tpuTopology", "4x4"),
        key=_key("tpuTopology"),
        generation_key=_key("tpuGeneration"),
    )
    num_slices = read.int("numSlices", 2, minimum=1, maximum=64)
    if num_slices > 1 and not shape.multi_host:
        raise ConfigError(
            _key("tpuTopology"),
            shape.topology,
            f"a multi-host topology: GKE Multislice ({num_slices} slices) needs multi-host slices",
        )
    elastic_min = read.int("elasticMinSlices", num_slices, minimum=1, maximum=num_slices)

    cidrs = parse_dcn_cidrs(read.str("dcnCidrs"))
    if cidrs is None:
        cidrs = TUTORIAL_DCN_CIDRS[: shape.generation.dcn_nics_per_host]
    if len(cidrs) > shape.generation.dcn_nics_per_host:
        raise ConfigError(
            _key("dcnCidrs"),
            list(cidrs),
            f"at most {shape.generation.dcn_nics_per_host} networks: a {shape.machine_type} host "
            f"has {shape.generation.dcn_nics_per_host} NICs that DRANET can hand to a pod",
        )

    version = read.str("clusterVersion", DRANET_MIN_VERSION["autopilot"])
    parse_gke_version(version, _key("clusterVersion"))
    if cidrs:
        check_dranet_version(mode, version)

    spot = read.bool("spot", False)
    reservation = read.dns_label("reservation", None)
    if spot and reservation:
        raise ConfigError(_key("reservation"), reservation, "unset when spot is true: Spot VMs cannot consume a reservation")

    existing = read.dns_label("existingClusterName", None)
    return StackConfig(
        project=project,
        region=region,
        zone=zone,
        cluster_name=read.dns_label("clusterName", "ray-tpu-multislice"),
        cluster_mode=mode,
        cluster_version=version,
        release_channel=read.choice("releaseChannel", "RAPID", RELEASE_CHANNELS),
        deletion_protection=read.bool("deletionProtection", True),
        existing_cluster_name=existing,
        existing_cluster_location=read.dns_label("existingClusterLocation", None),
        cpu_machine_type=read.matching(
            "cpuMachineType", "n1-standard-16", _MACHINE_TYPE, "a Compute Engine machine type such as n1-standard-16"
        ),
        cpu_node_count=read.int("cpuNodeCount", 3, minimum=1, maximum=1000),
        enable_multi_networking=read.bool("enableMultiNetworking", False),
        dcn_cidrs=cidrs,
        shape=shape,
        num_slices=num_slices,
        elastic_min_slices=elastic_min,
        spot=spot,
        reservation=reservation,
        bucket_name=check_bucket_name(read.required(_key("bucketName"))),
        bucket_deletion=read.choice("bucketDeletion", "retain", BUCKET_DELETION_POLICIES),
        namespace=read.dns_label("namespace", "default"),
        ksa_name=read.dns_label("ksaName", "ray-tpu-ksa"),
        ray_cluster_name=read.dns_label("rayClusterName", "maxtext-tpu-cluster"),
        ray_image=read.matching(
            "rayImage", DEFAULT_RAY_IMAGE, _IMAGE, "an image reference such as rayproject/ray:nightly-py312-tpu"
        ),
        megascale_port=read.int("megascalePort", 9915, minimum=1024, maximum=65535),
        project_number=_project_number(read.str("projectNumber")),
        planned_preset=_planned_preset(read.str("plannedPreset")),
        planned_overrides=_planned_overrides(read.str("plannedOverrides")),
    )


def _planned_preset(name: Optional[str]) -> Optional[str]:
    if name is not None:
        from training.presets import get_preset

        get_preset(name, key=_key("plannedPreset"))
    return name


def _planned_overrides(value: Optional[str]) -> dict[str, object]:
    expected = 'a JSON object of MaxText keys, e.g. {"per_device_batch_size": 2}'
    if value is None:
        return {}
    try:
        overrides = json.loads(value)
    except json.JSONDecodeError:
        raise ConfigError(_key("plannedOverrides"), value, expected) from None
    if not isinstance(overrides, dict) or not all(isinstance(v, (str, int, float)) for v in overrides.values()):
        raise ConfigError(_key("plannedOverrides"), value, expected)
    return overrides


def _project_number(value: Optional[str]) -> Optional[str]:
    if value is not None and not value.isdigit():
        raise ConfigError(_key("projectNumber"), value, "digits only, e.g. 123456789012")
    return value


def raw_pulumi_config() -> dict[str, str]:
    """Every config key of the running Pulumi program, as the engine passed it in."""
    from pulumi.runtime import config as runtime_config

    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
