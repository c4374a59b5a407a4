"""Hosts the seven components as the Pulumi package gke-ray-tpu, for programs in any language.

pulumi-language-python starts a plugin as ``<venv>/bin/python <plugin dir> <engine address>``
with the consumer's project as working directory, so only this folder is on sys.path.
The components (``gke_ray_tpu/components/``, and the ``gke_ray_tpu/core/`` they import) sit one level up, so
the repository root is put on sys.path before they are imported. Nothing may print to
stdout here: the host's only stdout line is the gRPC port the engine reads.
"""

import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
