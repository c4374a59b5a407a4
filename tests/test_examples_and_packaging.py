"""The components used from other stacks: an example program, and an installed wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from gke_ray_tpu.stack.mock_engine import load_stack_file, run_offline
from tests.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "tpu-slices-on-existing-cluster"


def test_the_library_exports_each_component_and_names_itself_for_any_other_name():
    import gke_ray_tpu.components as components

    assert all(getattr(components, name).__name__ == name for name in components.__all__)
    with pytest.raises(AttributeError, match=r"^module 'gke_ray_tpu\.components' has no attribute 'TpuSlice'$"):
        components.TpuSlice


def test_example_adds_slices_to_a_cluster_it_does_not_own():
    run = run_offline(load_stack_file(EXAMPLE / "Pulumi.example.yaml"), program=EXAMPLE / "__main__.py", project="tpu-slices-example")
    assert run.of_type("gcp:container/cluster:Cluster") == []
    pools = sorted(run.of_type("gcp:container/nodePool:NodePool"), key=lambda r: r.inputs["name"])
    assert [(p.inputs["name"], p.inputs["cluster"], p.inputs["nodeCount"]) for p in pools] == [
        ("v6e-16-0", "existing-gke-cluster", 4),
        ("v6e-16-1", "existing-gke-cluster", 4),
    ]
    assert [n.inputs["mtu"] for n in run.of_type("gcp:compute/network:Network")] == [8896, 8896]
    assert run.outputs == {
        "poolNames": ["v6e-16-0", "v6e-16-1"],
        "dcnNetworks": ["existing-gke-cluster-net-1", "existing-gke-cluster-net-2"],
    }


def test_wheel_ships_every_package_and_the_presets(tmp_path):
    # Build from a copy: setuptools' in-tree build/ directory would keep files deleted since.
    source = tmp_path / "src"
    shutil.copytree(
        REPO_ROOT,
        source,
        ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "local-runs", "__pycache__", "venv"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("gke_ray_tpu-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "gke_ray_tpu/components/__init__.py",
        "gke_ray_tpu/components/dcn_networks.py",
        "gke_ray_tpu/components/tpu_slice_node_pool.py",
        "gke_ray_tpu/components/gcs_workload_identity.py",
        "gke_ray_tpu/components/ray_tpu_cluster.py",
        "gke_ray_tpu/core/tpu_catalogue.py",
        "gke_ray_tpu/core/presets/llama3-8b.yml",
        "gke_ray_tpu/preflight/memory.py",
        "gke_ray_tpu/preflight/xla_compile.py",
        "gke_ray_tpu/stack/config.py",
        "gke_ray_tpu/training/worker/trainer.py",
        # The workers' image's build context: a WorkerImage of an installed library builds from it.
        "gke_ray_tpu/core/worker_env/pylock.toml",
        "gke_ray_tpu/core/worker_env/install.py",
        "gke_ray_tpu/core/worker_env/Dockerfile",
        "gke_ray_tpu/core/worker_env/.dockerignore",
    ):
        assert expected in names
    assert not [n for n in names if n.startswith("tests/") or n.endswith(".json")]  # test data stays out
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)], check=True)
    # The folders at the repository's root install under gke_ray_tpu only: no bare core, stack or training module.
    assert sorted(path.name for path in target.iterdir() if not path.name.endswith(".dist-info")) == ["gke_ray_tpu"]
    code = (
        "from gke_ray_tpu.components import DcnNetworks, TpuSliceNodePool, GcsWorkloadIdentity, RayTpuCluster;"
        "from gke_ray_tpu.core.presets import PRESETS; print(sorted(PRESETS) == ['llama3-70b', 'llama3-8b', 'llama3-8b-elastic', 'tiny-cpu'], DcnNetworks.__module__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target)}, capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["True", "gke_ray_tpu.components.dcn_networks"]
