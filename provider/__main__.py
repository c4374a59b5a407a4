"""Hosts the seven components as the Pulumi package gke-ray-tpu, for programs in any language.

pulumi-language-python starts a plugin as ``<venv>/bin/python <plugin dir> <engine address>``
with the consumer's project as working directory, so only this folder is on sys.path, and the plugin's venv
holds the SDKs, not this project. The components (``components/``, and the ``core/`` they import) sit one level
up and install as ``gke_ray_tpu.<folder>`` (pyproject.toml), so ``gke_ray_tpu`` is imported from the repository
and given its root as a place to look before they are imported. Nothing may print to stdout here: the host's only stdout line is
the gRPC port the engine reads.
"""

import sys
import tomllib
from pathlib import Path

_root = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, _root)
import gke_ray_tpu  # noqa: E402

gke_ray_tpu.__path__.append(_root)

from pulumi.provider.experimental import component_provider_host  # noqa: E402

from gke_ray_tpu.core import REPO_ROOT  # noqa: E402
from gke_ray_tpu.components import (  # noqa: E402
    DcnNetworks,
    GcsWorkloadIdentity,
    GkeRayCluster,
    MaxTextRun,
    RayTpuCluster,
    TpuQueue,
    TpuSliceNodePool,
)

PACKAGE = "gke-ray-tpu"


def package_version() -> str:
    """The library's version, from pyproject.toml: the schema and GetPluginInfo report it."""
    with open(REPO_ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]["version"]


if __name__ == "__main__":
    component_provider_host(
        components=[DcnNetworks, GkeRayCluster, TpuSliceNodePool, GcsWorkloadIdentity, RayTpuCluster, MaxTextRun,
                    TpuQueue],
        name=PACKAGE,
        version=package_version(),
    )
