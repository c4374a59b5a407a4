"""How a component takes another one it builds on, in Python and through the provider.

From Python a component takes the other component itself (``RayTpuClusterArgs(
workload_identity=storage)``, as pulumi-eks's node groups take the cluster) and
reads the fields it needs from the other's ``ref``: values where they are fixed
by the arguments, Outputs of the other's resources where they are not, so the
dependencies follow from the inputs.

The provider host (``pulumi.provider.experimental``, pulumi 3.272) cannot pass a
component across languages: its schema analyzer refuses an argument typed as a
ComponentResource of this package (it wants the class's ``pulumi_type`` and a
``pulumi-plugin.json`` to name an external package), and a resource reference
reaches ``construct`` only as its URN string, since nothing registers a
resource module for this package (``pulumi.runtime.rpc.deserialize_resource``).
So such an argument is declared as the ref's TypedDict: an object type in the
schema, whose fields a program in another language sets, wiring the other
component's outputs into those that take Inputs.
"""

from __future__ import annotations

from typing import Mapping

from gke_ray_tpu.core.errors import ConfigError


def resolve_ref(value: object, component: type, key: str) -> Mapping:
    """The fields ``value`` stands for: ``component.ref`` of a component, or the fields as the provider passes them."""
    ref = value.ref if isinstance(value, component) else value
    if not isinstance(ref, Mapping):
        # A URN string is what a component reference from another language turns into.
        raise ConfigError(key, value, f"a {component.__name__} (from another language: an object of its fields)")
    return ref
