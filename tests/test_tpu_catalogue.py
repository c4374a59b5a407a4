"""The TPU catalogue and topology math, without Pulumi."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.tpu_catalogue import GENERATIONS, slice_shape
from tests.conftest import REPO_ROOT

SHAPES = [
    # generation, topology, machine type, hosts, chips/host, pod type
    ("v6e", "4x4", "ct6e-standard-4t", 4, 4, "v6e-16"),
    ("v6e", "1x1", "ct6e-standard-1t", 1, 1, "v6e-1"),
    ("v6e", "2x4", "ct6e-standard-8t", 1, 8, "v6e-8"),
    ("v6e", "16x16", "ct6e-standard-4t", 64, 4, "v6e-256"),
    ("v5e", "2x2", "ct5lp-hightpu-4t", 1, 4, "v5litepod-4"),
    ("v5e", "8x8", "ct5lp-hightpu-4t", 16, 4, "v5litepod-64"),
    ("v5p", "2x2x1", "ct5p-hightpu-4t", 1, 4, "v5p-8"),
    ("v5p", "2x2x4", "ct5p-hightpu-4t", 4, 4, "v5p-32"),
    ("v4", "2x2x2", "ct4p-hightpu-4t", 2, 4, "v4-16"),
    ("tpu7x", "2x2x1", "tpu7x-standard-4t", 1, 4, "v7x-8"),
    ("tpu7x", "4x4x4", "tpu7x-standard-4t", 16, 4, "v7x-128"),
]


@pytest.mark.parametrize(("gen", "topology", "machine", "hosts", "chips_per_host", "pod_type"), SHAPES)
def test_slice_shapes(gen, topology, machine, hosts, chips_per_host, pod_type):
    shape = slice_shape(gen, topology)
    assert (shape.machine_type, shape.hosts, shape.chips_per_host, shape.pod_type) == (
        machine,
        hosts,
        chips_per_host,
        pod_type,
    )
    assert shape.hosts * shape.chips_per_host == shape.chips


def test_tutorial_slice_facts():
    shape = slice_shape("v6e", "4x4")
    assert shape.generation.gke_accelerator == "tpu-v6e-slice"
    assert shape.generation.ray_accelerator_type == "TPU-V6E"
    assert shape.multi_host and shape.generation.supports_dranet
    assert shape.hbm_gib == 16 * 32


def test_every_topology_has_the_generations_rank_and_fills_whole_hosts():
    for gen in GENERATIONS.values():
        for topology in gen.topologies:
            assert topology.count("x") + 1 == gen.topology_rank, (gen.name, topology)
            shape = slice_shape(gen.name, topology)
            assert shape.chips % shape.chips_per_host == 0


def test_unknown_topology_lists_the_valid_ones():
    with pytest.raises(ConfigError) as error:
        slice_shape("v5p", "4x4", key="tpuTopology")
    assert str(error.value) == (
        "invalid config tpuTopology='4x4': expected a v5p topology: "
        "2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8"
    )


def test_unknown_generation_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"tpuGeneration='v3': expected one of tpu7x, v4, v5e, v5p, v6e"):
        slice_shape("v3", "2x2", generation_key="tpuGeneration")


def test_core_imports_without_pulumi_ray_or_jax():
    code = (
        "import sys, gke_ray_tpu.core.tpu_catalogue, gke_ray_tpu.core.job_spec, gke_ray_tpu.core.sharding, gke_ray_tpu.preflight.memory, gke_ray_tpu.preflight.cost, gke_ray_tpu.core.gke, gke_ray_tpu.core.naming;"
        "print(sorted(m for m in ('pulumi', 'ray', 'jax') if m in sys.modules) or 'none')"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "none"
