"""TPU prices per chip-hour, as data with their source and date.

Source of every number below unless noted: the SkyPilot GCP catalogue,
``skypilot-org/skypilot-catalog`` ``catalogs/v7/gcp/vms.csv`` at commit
``017e2502fb63c7a28757acd94002b2d6099d3e3d`` (a generated file; SkyPilot builds
it from the Google Cloud Billing Catalog API). That file lists a price per
*slice* (``tpu-v6e-16`` = 16 chips: us-east5 on-demand 43.2, Spot 17.28 USD/h);
the values here are those divided by the slice's chip count, and every size
of a generation gives the same per-chip price. The stored copy carries no
date, so ``as_of`` names the snapshot; Spot prices move (Google may change
them as often as every day), so treat Spot as indicative.

Corroboration: Google's Trillium GA announcement (December 2024, as reported
by neowin.net, "Google takes on Nvidia Blackwell GPUs with the new Trillium
TPUs") gives v6e "starting at $2.7000 per chip-hour" on demand, matching the
US rows.

GKE bills TPU nodes at these Compute Engine TPU rates; the GKE cluster fee,
the CPU head node, disks, networking and the GCS bucket are NOT included.
tpu7x (Ironwood) has no grounded price: asking for it is a ConfigError.
"""

from __future__ import annotations

from dataclasses import dataclass

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.tpu_catalogue import GENERATIONS

SKYPILOT_SOURCE = (
    "https://github.com/skypilot-org/skypilot-catalog/blob/"
    "017e2502fb63c7a28757acd94002b2d6099d3e3d/catalogs/v7/gcp/vms.csv"
)
SKYPILOT_AS_OF = "undated snapshot: skypilot-catalog commit 017e2502 (read 2026)"


@dataclass(frozen=True)
class ChipPrice:
    generation: str
    region: str
    on_demand_usd_per_chip_hour: float
    spot_usd_per_chip_hour: float
    as_of: str
    source: str

    def usd_per_chip_hour(self, spot: bool) -> float:
        return self.spot_usd_per_chip_hour if spot else self.on_demand_usd_per_chip_hour


def _sky(generation: str, region: str, slice_chips: int, on_demand: float, spot: float) -> ChipPrice:
    """One catalogue row (per-slice USD/h) converted to per chip-hour."""
    return ChipPrice(
        generation=generation,
        region=region,
        on_demand_usd_per_chip_hour=round(on_demand / slice_chips, 6),
        spot_usd_per_chip_hour=round(spot / slice_chips, 6),
        as_of=SKYPILOT_AS_OF,
        source=SKYPILOT_SOURCE,
    )


# Rows copied from the catalogue: (generation, region, chips in the row's slice, on-demand, spot).
PRICES: tuple[ChipPrice, ...] = (
    # v6e: row tpu-v6e-16 (16 chips)
    _sky("v6e", "us-east5", 16, 43.2, 17.28),
    _sky("v6e", "us-east1", 16, 43.2, 10.37331),
    _sky("v6e", "us-east4", 16, 43.2, 13.73328),
    _sky("v6e", "us-central1", 16, 43.2, 10.37331),
    _sky("v6e", "us-south1", 16, 43.2, 30.24),
    _sky("v6e", "us-west1", 16, 43.2, 10.37331),
    _sky("v6e", "europe-west4", 16, 47.52, 11.41062),
    _sky("v6e", "asia-northeast1", 16, 51.84, 17.22902),
    # v5e: row tpu-v5litepod-16 (16 chips)
    _sky("v5e", "us-east5", 16, 19.2, 9.6),
    _sky("v5e", "us-east1", 16, 19.2, 3.40766),
    _sky("v5e", "us-central1", 16, 19.2, 3.40766),
    _sky("v5e", "us-west1", 16, 19.2, 3.40766),
    _sky("v5e", "us-west4", 16, 19.2, 7.5072),
    _sky("v5e", "us-south1", 16, 22.656, 9.0624),
    _sky("v5e", "europe-west4", 16, 24.96, 7.08179),
    # v5p: row tpu-v5p-16 (8 chips, 2 cores each)
    _sky("v5p", "us-east5", 8, 33.6, 12.48072),
    _sky("v5p", "us-east1", 8, 33.6, 13.44),
    _sky("v5p", "us-central1", 8, 33.6, 13.44),
    _sky("v5p", "us-south1", 8, 38.232, 19.1632),
    _sky("v5p", "europe-west4", 8, 34.02, 10.78792),
    # v4: row tpu-v4-16 (8 chips, 2 cores each)
    _sky("v4", "us-central2", 8, 25.76, 7.372),
)

DEFAULT_REGION = "us-east5"


def chip_price(
    generation: str,
    region: str = DEFAULT_REGION,
    *,
    generation_key: str = "generation",
    region_key: str = "region",
) -> ChipPrice:
    """Price of one chip-hour; unknown generation or region is a ConfigError (keys overridable)."""
    if generation not in GENERATIONS:
        raise ConfigError(generation_key, generation, f"one of {', '.join(sorted(GENERATIONS))}")
    rows = [p for p in PRICES if p.generation == generation]
    if not rows:
        priced = sorted({p.generation for p in PRICES})
        raise ConfigError(
            generation_key,
            generation,
            f"a generation with grounded prices ({', '.join(priced)}); none recorded for {generation}",
        )
    for row in rows:
        if row.region == region:
            return row
    raise ConfigError(
        region_key,
        region,
        f"a region with {generation} prices: {', '.join(sorted(r.region for r in rows))}",
    )


# -- what a stack costs besides its TPUs ---------------------------------------------------------

CPU_USD_PER_VCPU_HOUR = 0.031611
CPU_USD_PER_GIB_HOUR = 0.004237
"""Compute Engine's N1/N2 predefined rates in us-central1, us-east1 and us-east5, per vCPU-hour and per
GiB-hour: they reproduce the SkyPilot catalogue's n2-highmem-16 us-east5 row ($1.04811/h)."""
_GIB_PER_VCPU = {"n1-standard": 3.75, "n1-highmem": 6.5, "n2-standard": 4.0, "n2-highmem": 8.0}

E2_MEDIUM_USD_PER_HOUR = 0.033503
"""Compute Engine's on-demand e2-medium in us-central1 and us-east1 (a shared-core E2: 1 vCPU-hour at $0.021811
plus 4 GiB at $0.002923 per GiB-hour), the system pool's node on a stack that scales to zero."""
_FIXED_PRICES = {"e2-medium": E2_MEDIUM_USD_PER_HOUR}

GKE_CLUSTER_FEE_USD_PER_HOUR = 0.10
"""GKE pricing: $0.10 per cluster-hour for Standard and Autopilot clusters; the free tier's $74.40 monthly
credit per billing account covers one zonal or Autopilot cluster."""
HOURS_PER_MONTH = 730


def cpu_machine_usd_per_hour(machine_type: str) -> float | None:
    """On-demand USD/h of an N1/N2 standard or highmem machine or an e2-medium (None: a type this table does not price)."""
    if machine_type in _FIXED_PRICES:
        return _FIXED_PRICES[machine_type]
    family, _, size = machine_type.rpartition("-")
    if family not in _GIB_PER_VCPU or not size.isdigit():
        return None
    vcpus = int(size)
    return round(vcpus * CPU_USD_PER_VCPU_HOUR + vcpus * _GIB_PER_VCPU[family] * CPU_USD_PER_GIB_HOUR, 6)
