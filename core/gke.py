"""GKE facts the stack relies on: version strings, the DRANET minimums, what a cluster must have.

Pure data and functions; the lookups that feed them (the versions GKE offers
in a location, an existing cluster's settings) are Pulumi invokes made by
``gke_ray_tpu.components.gke_cluster``.

Versions. GKE accepts a cluster version as an exact patch
(``1.35.2-gke.1842000``) or as a minor (``1.35``: the newest patch of 1.35 the
cluster's release channel offers). Channels drop patch versions as newer ones
ship (Rapid dropped 1.34.1-gke.1829001, the Standard DRANET minimum, in
November 2025), so an exact pin stops working for new clusters; a minor keeps
working for as long as the channel offers that minor. Either way the version
must be at least the GKE-managed DRANET minimum of the cluster's mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from gke_ray_tpu.core.errors import ConfigError

DRANET_MIN_VERSION = {
    "standard": "1.34.1-gke.1829001",
    "autopilot": "1.35.2-gke.1842000",
}
"""GKE-managed DRANET minimums (GKE "Allocate network resources with DRA")."""

FLEX_START_TPU_MIN_VERSION = "1.33.0-gke.1712000"
"""GKE's minimum for TPU node pools with flex-start (GKE "About flex-start"; GPUs: 1.32.2-gke.1652000)."""

GCS_FUSE_TUNING_MIN_VERSION = "1.32.2-gke.1297001"
"""The GKE version from which Google documents the GCS FUSE mount options the RayCluster uses
(``gke_ray_tpu.components.ray_manifests.GCS_FUSE_MOUNT_OPTIONS``: its sample mounts for checkpointing and the
JAX cache, gcsfuse >= 3.0). Below both DRANET minimums; it binds a stack without DCN networks."""

CLUSTER_MODES = ("standard", "autopilot")
RELEASE_CHANNELS = ("UNSPECIFIED", "RAPID", "REGULAR", "STABLE", "EXTENDED")

_PATCH = re.compile(r"(\d+)\.(\d+)\.(\d+)-gke\.(\d+)")
_MINOR = re.compile(r"(\d+)\.(\d+)")

VERSION_FORMS = "a GKE minor such as 1.35 (follow the channel's newest patch) or an exact version such as 1.35.2-gke.1842000"


@dataclass(frozen=True, order=True)
class GkeVersion:
    """A GKE version; ``patch`` and ``gke`` are None for a minor (``1.35``)."""

    major: int
    minor: int
    patch: Optional[int] = None
    gke: Optional[int] = None

    @property
    def is_minor(self) -> bool:
        return self.patch is None

    @property
    def lookup_prefix(self) -> str:
        """The prefix to ask GKE's server config with: ``1.35.`` for a minor, the version itself for a pin."""
        return f"{self.major}.{self.minor}." if self.is_minor else str(self)

    def __str__(self) -> str:
        if self.is_minor:
            return f"{self.major}.{self.minor}"
        return f"{self.major}.{self.minor}.{self.patch}-gke.{self.gke}"


def parse_version(text: object, key: str) -> GkeVersion:
    if isinstance(text, str):
        if match := _PATCH.fullmatch(text):
            return GkeVersion(*(int(group) for group in match.groups()))
        if match := _MINOR.fullmatch(text):
            return GkeVersion(*(int(group) for group in match.groups()))
    raise ConfigError(key, text, VERSION_FORMS)


def check_floor(version: GkeVersion, floor_text: str, needs: str, key: str) -> None:
    """A version, or a whole minor, below ``floor_text`` is refused: ``needs`` says what needs it."""
    floor = parse_version(floor_text, key)
    low = (version.major, version.minor) < (floor.major, floor.minor) if version.is_minor else version < floor
    if low:
        raise ConfigError(key, str(version), f"{floor} or later: {needs}")


def check_dranet_floor(mode: str, version: GkeVersion, key: str) -> None:
    """A version, or a whole minor, below the DRANET minimum of ``mode`` is refused."""
    check_floor(version, DRANET_MIN_VERSION[mode], f"GKE-managed DRANET needs it in {mode} mode", key)


def check_flex_start_floor(version: GkeVersion, key: str) -> None:
    """TPU flex-start node pools need GKE's documented minimum."""
    check_floor(version, FLEX_START_TPU_MIN_VERSION, "GKE provisions TPUs with flex-start from that version", key)


def check_gcs_fuse_floor(version: GkeVersion, key: str) -> None:
    """The bucket's mount options need GKE's documented minimum for them."""
    check_floor(version, GCS_FUSE_TUNING_MIN_VERSION, "the RayCluster's GCS FUSE mount options need it", key)


def newest(versions: Sequence[str]) -> Optional[str]:
    """The newest exact version of ``versions`` (GKE lists them as text)."""
    parsed = [(v, text) for text in versions if (v := _parse_offered(text)) is not None]
    return max(parsed)[1] if parsed else None


def _parse_offered(text: str) -> Optional[GkeVersion]:
    match = _PATCH.fullmatch(text)
    return GkeVersion(*(int(group) for group in match.groups())) if match else None


@dataclass(frozen=True)
class ClusterFacts:
    """What an existing cluster has, read from GKE (``getCluster``)."""

    name: str
    autopilot: bool
    datapath_provider: str
    workload_pool: str
    ray_operator: bool
    gcs_fuse_csi: bool
    master_version: str


def missing_for_ray_on_tpus(facts: ClusterFacts, project: str, mode: str, dranet: bool) -> list[str]:
    """What the stack relies on that ``facts`` lacks, one phrase each (empty: the cluster will do)."""
    missing = []
    if facts.autopilot != (mode == "autopilot"):
        missing.append(f"clusterMode {mode} (the cluster is {'autopilot' if facts.autopilot else 'standard'})")
    if not facts.autopilot and facts.datapath_provider != "ADVANCED_DATAPATH":
        missing.append(f"Dataplane V2 (datapath {facts.datapath_provider or 'LEGACY_DATAPATH'}; DRANET needs ADVANCED_DATAPATH)")
    if facts.workload_pool != f"{project}.svc.id.goog":
        missing.append(f"Workload Identity pool {project}.svc.id.goog (has {facts.workload_pool or 'none'})")
    if not facts.ray_operator:
        missing.append("the Ray operator add-on")
    if not facts.gcs_fuse_csi:
        missing.append("the GCS FUSE CSI driver add-on")
    current = _parse_offered(facts.master_version)
    floor = _parse_offered(DRANET_MIN_VERSION[mode])
    if dranet and (current is None or current < floor):
        missing.append(f"GKE {floor} or later for DRANET (runs {facts.master_version or 'an unknown version'})")
    fuse_floor = _parse_offered(GCS_FUSE_TUNING_MIN_VERSION)
    if current is None or current < fuse_floor:
        missing.append(
            f"GKE {fuse_floor} or later for the GCS FUSE mount options (runs {facts.master_version or 'an unknown version'})"
        )
    return missing
