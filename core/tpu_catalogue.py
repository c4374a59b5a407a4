"""TPU facts for GKE as plain data, and the topology math built on them.

This module is the single source of truth for everything the stack derives from
"a TPU generation and a topology": the GKE machine type, how many VMs (hosts) a
slice has, how many chips each host exposes as ``google.com/tpu``, the node
labels GKE puts on the nodes, the names Ray uses, the HBM and peak bf16 FLOP/s
the estimates need.

It imports nothing from Pulumi, so it can be unit tested (and reused by the
trainer and the estimates) without any SDK.

Sources: the Cloud TPU pages of each generation (docs.cloud.google.com/tpu/docs/v4,
v5e, v5p, v6e, tpu7x; 2026-08 snapshots), GKE's "Plan TPUs in GKE" and
Ironwood pages, and the AI-Hypercomputer/xpk system catalogue
(``src/xpk/core/system_characteristics.py``, 2026-06).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from gke_ray_tpu.core.errors import ConfigError

DEFAULT_GENERATION = "v6e"
DEFAULT_TOPOLOGY = "4x4"
"""The tutorial's slice: Trillium, 4 hosts of 4 chips (ct6e-standard-4t)."""


@dataclass(frozen=True)
class TpuGeneration:
    """Static facts about one TPU generation as GKE exposes it."""

    name: str
    """Short name used in stack config: ``v4``, ``v5e``, ``v5p``, ``v6e``, ``tpu7x``."""
    gke_accelerator: str
    """Value of the ``cloud.google.com/gke-tpu-accelerator`` node label."""
    ray_accelerator_type: str
    """``ScalingConfig(accelerator_type=...)`` / ``ray.io/accelerator-type`` value."""
    pod_type_prefix: str
    """Prefix of the pod type name (``v6e-16``): Ray's ``ray.io/tpu-pod-type`` label."""
    topology_rank: int
    """2 for 2D tori (v5e, v6e), 3 for 3D (v4, v5p, tpu7x)."""
    topologies: tuple[str, ...]
    """Slice shapes GKE accepts for this generation, smallest first."""
    multi_host_machine_type: str
    """Machine type of every host of a multi-host slice (4 chips per VM)."""
    single_host_machine_types: Mapping[str, str]
    """Topologies served by one VM, and the machine type that serves each."""
    tensorcores_per_chip: int
    """Used by the pod type name: ``v5p-16`` is 8 chips (2 cores each)."""
    hbm_gib_per_chip: float
    peak_bf16_tflops_per_chip: float
    dcn_nics_per_host: int
    """Extra gVNICs a multi-host VM offers for DCN (DRANET netdevs); 0 = no DRANET."""
    xla_hbm_limit_gib: float
    """HBM one JAX device may use, as XLA's TPU compiler states it ("exceeds available
    HBM (31.24G)", G = GiB), below the nominal HBM by what the runtime keeps. Measured
    on a CPU host with libtpu 0.0.50.1 by compiling a program too large for the
    generation's topology (``gke_ray_tpu.preflight.xla_compile.hbm_limit_gib``);
    ``tests/test_xla_check.py`` compiles v6e's again."""
    uses_workload_policy: bool = False
    """Multi-host placement goes through a workload policy, not COMPACT placement."""
    flex_start: bool = False
    """GKE can provision it with flex-start (Dynamic Workload Scheduler): GKE's "About
    flex-start" page lists v5e, v5p and v6e zones, and says v3/v4 are not supported;
    Ironwood is not listed there, so it is refused until it is."""
    jax_devices_per_chip: int = 1
    """JAX devices MaxText compiles one chip as: 1 (v4 and v5p in megacore mode), 2 on
    tpu7x, whose TensorCores are separate devices."""
    maxtext_prefix: str = ""
    """MaxText's name for the generation in ``compile_topology`` (``v5e-16``), where it
    differs from the pod type prefix."""

    @property
    def xla_hbm_limit_gib_per_chip(self) -> float:
        return self.xla_hbm_limit_gib * self.jax_devices_per_chip

    @property
    def supports_dranet(self) -> bool:
        return self.dcn_nics_per_host > 0


CHIPS_PER_MULTI_HOST_VM = 4

_CUBES_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8")
_GRIDS_2D = ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")

GENERATIONS: dict[str, TpuGeneration] = {
    g.name: g
    for g in (
        TpuGeneration(
            name="v4",
            gke_accelerator="tpu-v4-podslice",
            ray_accelerator_type="TPU-V4",
            pod_type_prefix="v4",
            topology_rank=3,
            topologies=_CUBES_3D,
            multi_host_machine_type="ct4p-hightpu-4t",
            single_host_machine_types={"2x2x1": "ct4p-hightpu-4t"},
            tensorcores_per_chip=2,
            hbm_gib_per_chip=32,
            peak_bf16_tflops_per_chip=275,
            dcn_nics_per_host=0,
            xla_hbm_limit_gib=30.75,
        ),
        TpuGeneration(
            name="v5e",
            gke_accelerator="tpu-v5-lite-podslice",
            ray_accelerator_type="TPU-V5LITEPOD",
            pod_type_prefix="v5litepod",
            topology_rank=2,
            topologies=("1x1", "2x2") + _GRIDS_2D,
            multi_host_machine_type="ct5lp-hightpu-4t",
            single_host_machine_types={
                "1x1": "ct5lp-hightpu-1t",
                "2x2": "ct5lp-hightpu-4t",
                "2x4": "ct5lp-hightpu-8t",
            },
            tensorcores_per_chip=1,
            hbm_gib_per_chip=16,
            peak_bf16_tflops_per_chip=197,
            dcn_nics_per_host=0,
            flex_start=True,
            xla_hbm_limit_gib=15.75,
            maxtext_prefix="v5e",
        ),
        TpuGeneration(
            name="v5p",
            gke_accelerator="tpu-v5p-slice",
            ray_accelerator_type="TPU-V5P",
            pod_type_prefix="v5p",
            topology_rank=3,
            topologies=_CUBES_3D,
            multi_host_machine_type="ct5p-hightpu-4t",
            single_host_machine_types={"2x2x1": "ct5p-hightpu-4t"},
            tensorcores_per_chip=2,
            hbm_gib_per_chip=95,
            peak_bf16_tflops_per_chip=459,
            dcn_nics_per_host=0,
            flex_start=True,
            xla_hbm_limit_gib=95.73,
        ),
        TpuGeneration(
            name="v6e",
            gke_accelerator="tpu-v6e-slice",
            ray_accelerator_type="TPU-V6E",
            pod_type_prefix="v6e",
            topology_rank=2,
            topologies=("1x1", "2x2") + _GRIDS_2D,
            multi_host_machine_type="ct6e-standard-4t",
            single_host_machine_types={
                "1x1": "ct6e-standard-1t",
                "2x2": "ct6e-standard-4t",
                "2x4": "ct6e-standard-8t",
            },
            tensorcores_per_chip=1,
            hbm_gib_per_chip=32,
            peak_bf16_tflops_per_chip=918,
            dcn_nics_per_host=2,
            flex_start=True,
            xla_hbm_limit_gib=31.24,
        ),
        TpuGeneration(
            name="tpu7x",
            gke_accelerator="tpu7x",
            ray_accelerator_type="TPU-V7X",
            pod_type_prefix="v7x",
            topology_rank=3,
            topologies=_CUBES_3D,
            multi_host_machine_type="tpu7x-standard-4t",
            single_host_machine_types={"2x2x1": "tpu7x-standard-4t"},
            tensorcores_per_chip=2,
            hbm_gib_per_chip=192,
            peak_bf16_tflops_per_chip=2307,
            dcn_nics_per_host=2,
            uses_workload_policy=True,
            xla_hbm_limit_gib=94.74,
            jax_devices_per_chip=2,
            maxtext_prefix="tpu7x",
        ),
    )
}


@dataclass(frozen=True)
class SliceShape:
    """One TPU slice: a generation and a topology, with everything derived from them."""

    generation: TpuGeneration
    topology: str
    chips: int
    hosts: int
    chips_per_host: int
    machine_type: str

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    @property
    def pod_type(self) -> str:
        """Ray/xpk pod type name, e.g. ``v6e-16`` for a v6e 4x4."""
        cores = self.chips * self.generation.tensorcores_per_chip
        return f"{self.generation.pod_type_prefix}-{cores}"

    @property
    def hbm_gib(self) -> float:
        return self.chips * self.generation.hbm_gib_per_chip

    @property
    def maxtext_accelerator(self) -> str:
        """MaxText's ``compile_topology`` name of the slice: ``v6e-16``, ``v5e-16``, ``tpu7x-16`` (TensorCores, as the pod type)."""
        prefix = self.generation.maxtext_prefix or self.generation.pod_type_prefix
        return f"{prefix}-{self.chips * self.generation.tensorcores_per_chip}"


def generation(name: str, key: str = "generation") -> TpuGeneration:
    """Look a generation up by name; unknown names are a ConfigError listing the known ones."""
    try:
        return GENERATIONS[name]
    except KeyError:
        raise ConfigError(key, name, f"one of {', '.join(sorted(GENERATIONS))}") from None


def topology_chips(topology: str) -> int:
    return math.prod(int(d) for d in topology.split("x"))


def slice_shape(
    generation_name: str,
    topology: str,
    key: str = "topology",
    generation_key: str = "generation",
) -> SliceShape:
    """Derive a slice's machine type, host count and chips per host.

    >>> s = slice_shape("v6e", "4x4")
    >>> (s.machine_type, s.hosts, s.chips_per_host)
    ('ct6e-standard-4t', 4, 4)
    """
    gen = generation(generation_name, key=generation_key)
    if topology not in gen.topologies:
        raise ConfigError(
            key,
            topology,
            f"a {gen.name} topology: {', '.join(gen.topologies)}",
        )
    chips = topology_chips(topology)
    single_host_type = gen.single_host_machine_types.get(topology)
    if single_host_type is not None:
        return SliceShape(gen, topology, chips, 1, chips, single_host_type)
    hosts = chips // CHIPS_PER_MULTI_HOST_VM
    return SliceShape(
        gen, topology, chips, hosts, CHIPS_PER_MULTI_HOST_VM, gen.multi_host_machine_type
    )
