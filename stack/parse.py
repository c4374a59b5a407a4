"""The stack's config, read: ``Pulumi.<stack>.yaml``'s raw strings validated into a
:class:`~gke_ray_tpu.stack.config.StackConfig` before anything is registered.

:func:`parse_stack_config` refuses retired, unknown and empty keys, checks each key against the key table
(``stack/config.py``: its type, default, rule and description) and then the rules across keys
(``stack/cross_keys.py``). Every failure is one :class:`~gke_ray_tpu.core.errors.ConfigError` naming the key the
user sets (``gke-ray-tpu:releaseChannel``), the bad value and what would be valid (``stack/config_errors.py``
words it); names the stack derives from a value (``<clusterName>-net-1``, the RayCluster's Services) are checked
against the platform's rules under the key they come from. Errors components raise are renamed to the keys behind
their arguments by ``stack/component_keys.py``; the declared runs are built by ``stack/plan.py``.
"""

from __future__ import annotations

from typing import Mapping

from pydantic import ValidationError

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.config_errors import config_error
from gke_ray_tpu.stack.cross_keys import check_across_keys
from gke_ray_tpu.stack.config import GCP_KEYS, NAMESPACE, RETIRED_KEYS, StackConfig


def parse_stack_config(raw: Mapping[str, str]) -> StackConfig:
    """Validate the raw config of one stack (``{full key: string}``). Raises ConfigError on the first bad key."""
    ours = {key: value for key, value in raw.items() if key.startswith(NAMESPACE + ":") or key in GCP_KEYS}
    for key, instead in RETIRED_KEYS.items():
        if key in ours:
            raise ConfigError(key, ours[key], instead)
    known = {field.alias for field in StackConfig.model_fields.values()}
    unknown = sorted(key for key in ours if key not in known)
    if unknown:
        names = ", ".join(sorted(alias.split(":", 1)[1] for alias in known if alias.startswith(NAMESPACE)))
        raise ConfigError(unknown[0], ours[unknown[0]], f"a known key: {names}")
    empty = sorted(key for key, value in ours.items() if value == "")
    if empty:
        # What `pulumi config set <key> ""` stores: no key takes it, and it does not mean unset.
        raise ConfigError(empty[0], "", f"a non-empty value (or remove the key: `pulumi config rm {empty[0]}`)")
    try:
        cfg = StackConfig.model_validate(ours)
    except ValidationError as error:
        raise config_error(error, ours) from None
    check_across_keys(cfg)
    return cfg


def raw_pulumi_config() -> dict[str, str]:
    """Every config key of the running Pulumi program, as the engine passed it in."""
    from pulumi.runtime import config as runtime_config

    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
