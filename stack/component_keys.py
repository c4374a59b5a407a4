"""Errors raised inside the components, under the config keys the program's user sets.

``__main__.py`` builds every component inside :func:`config_keys`, so a
component's ``RayTpuClusterArgs.image`` error reaches the user as
``gke-ray-tpu:rayImage``. Which key is behind which argument follows from the
config model: each field declares the arguments it feeds (``feeds`` in
``stack/config.py``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.config import StackConfig


def component_keys(cfg: StackConfig) -> dict[str, str]:
    """The config key behind each component argument the stack sets, for errors raised inside components.

    Where two keys feed one argument (``clusterName`` and ``existingClusterName`` feed
    ``GkeRayClusterArgs.cluster_name``), the one declared later wins when it is set: it is the one the stack uses.
    """
    keys: dict[str, str] = {}
    for name, field in StackConfig.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        for argument in extra.get("feeds", ()):
            if argument not in keys or getattr(cfg, name) is not None:
                keys[argument] = field.alias  # type: ignore[assignment]
    return keys


@contextmanager
def config_keys(cfg: StackConfig) -> Iterator[None]:
    """Errors raised inside components name the config key the user sets, not the component argument."""
    try:
        yield
    except ConfigError as error:
        renamed = component_keys(cfg).get(error.key)
        if renamed is None:
            raise
        raise error.renamed(renamed) from None
