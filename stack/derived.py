"""Values the stack derives from its config keys: the slice shape, the defaults of unset keys, the names and
locations the keys imply. A mixin of :class:`gke_ray_tpu.stack.config.StackConfig`, each value computed once per
parsed config (``cached_property``) and read by the cross-key rules, the wiring and the checks.
"""

from __future__ import annotations

from functools import cached_property
from typing import Optional

from gke_ray_tpu.components import dcn_networks
from gke_ray_tpu.core import capacity as capacity_rules, slices
from gke_ray_tpu.core.tpu_catalogue import SliceShape, slice_shape


class DerivedValues:
    """What StackConfig's keys imply; a derivation that can fail raises ConfigError under the key it reads."""

    @classmethod
    def key(cls, field: str) -> str:
        """The config key the user sets for ``field`` (``gke-ray-tpu:tpuTopology`` for ``tpu_topology``)."""
        return cls.model_fields[field].alias  # type: ignore[attr-defined]

    @cached_property
    def shape(self) -> SliceShape:
        return slice_shape(
            self.tpu_generation, self.tpu_topology, key=self.key("tpu_topology"), generation_key=self.key("tpu_generation")
        )

    @cached_property
    def autopilot(self) -> bool:
        return self.cluster_mode == "autopilot"

    @cached_property
    def zone_or_default(self) -> str:
        return self.zone or f"{self.region}-b"

    @cached_property
    def cluster_location(self) -> str:
        """Autopilot clusters are regional; the tutorial's Standard cluster is zonal."""
        if self.existing_cluster_name:
            return self.existing_cluster_location or self.zone_or_default
        return self.region if self.autopilot else self.zone_or_default

    @cached_property
    def dcn_cidrs_or_default(self) -> tuple[str, ...]:
        if self.dcn_cidrs is None:
            return dcn_networks.DEFAULT_CIDRS[: self.shape.generation.dcn_nics_per_host]
        return dcn_networks.check_cidrs(self.dcn_cidrs, key=self.key("dcn_cidrs"))

    @cached_property
    def scale_to_zero_or_default(self) -> bool:
        return self.capacity_mode.scale_to_zero(self.scale_to_zero)

    @cached_property
    def elastic_min_slices_or_default(self) -> int:
        return slices.elastic_min_slices(self.elastic_min_slices, self.num_slices, self.key("elastic_min_slices"))

    @cached_property
    def capacity_mode(self) -> capacity_rules.CapacityMode:
        return capacity_rules.CAPACITY[self.capacity]

    @cached_property
    def image_repository(self) -> str:
        """The Artifact Registry repository the workers' image goes to: the existing one, or the one the stack creates."""
        return self.existing_image_repository or f"{self.cluster_name}-images"

    @cached_property
    def compute_class_name(self) -> Optional[str]:
        return f"{self.ray_cluster_name}-tpu" if self.autopilot else None
