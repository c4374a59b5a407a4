"""Rules shared by the components' argument checks."""

from __future__ import annotations

from gke_ray_tpu.core.errors import ConfigError


def integer(value: object, low: int, high: int | None, key: str) -> int:
    """An integer in [low, high] (``high`` None: no upper bound).

    A component hosted for other languages gets JSON numbers (3.0), so a whole float counts.
    """
    expected = f"an integer between {low} and {high}" if high is not None else f"an integer >= {low}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ConfigError(key, value, expected)
    if not low <= value <= (high if high is not None else value):
        raise ConfigError(key, value, expected)
    return int(value)
