"""The tutorial's training runs as data: one YAML overlay per preset, beside this file.

Each ``<name>.yml`` holds a description, the tutorial's run name, the backend
(``tpu`` or ``cpu``), whether the run is elastic, and the MaxText settings of
one ``ray job submit`` command of the tutorial, in the tutorial's order, as
typed values (:mod:`gke_ray_tpu.core.maxtext`). ``base: <preset>`` starts from another
preset, the way MaxText's model overlays start from ``base.yml``.
``base_output_directory`` (first) and ``run_name`` (last) are added when the
job is built (:mod:`gke_ray_tpu.core.job_spec`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Literal, Mapping

import yaml

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.maxtext import Value, check_settings

Backend = Literal["tpu", "cpu"]
BACKENDS = ("tpu", "cpu")
DEFAULT_PRESET = "llama3-8b"
"""The run of a cluster when none is named: the tutorial's 8B run (the submit command, a declared run, the planned run)."""
PRESET_DIR = resources.files(__name__)
"""The YAML files, read through importlib so presets load from a zip as well (a declared run's code archive)."""


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    run_name: str
    """The tutorial's run name; every submission makes it unique."""
    backend: Backend = "tpu"
    elastic: bool = False
    """Run with ``num_workers=(min, max)`` whole slices and ``FailureConfig(max_failures=3)``."""
    maxtext: Mapping[str, Value] = field(default_factory=dict)
    """MaxText settings in argv order."""


def _load(name: str, seen: tuple[str, ...] = ()) -> Preset:
    path = PRESET_DIR / f"{name}.yml"
    if name in seen or not path.is_file():
        raise ConfigError("base", name, f"one of {', '.join(_names())} (and no cycle: {' -> '.join(seen)})")
    data = yaml.safe_load(path.read_text()) or {}
    base = _load(data["base"], (*seen, name)) if "base" in data else None
    maxtext = {**(base.maxtext if base else {}), **(data.get("maxtext") or {})}
    check_settings(maxtext, key=lambda key: f"{path.name}: {key}")
    backend = data.get("backend", base.backend if base else "tpu")
    if backend not in BACKENDS:
        raise ConfigError(f"{path.name}: backend", backend, f"one of {', '.join(BACKENDS)}")
    return Preset(
        name=name,
        description=data["description"],
        run_name=data["run_name"],
        backend=backend,
        elastic=bool(data.get("elastic", False)),
        maxtext=maxtext,
    )


def _names() -> list[str]:
    return sorted(p.name.removesuffix(".yml") for p in PRESET_DIR.iterdir() if p.name.endswith(".yml"))


PRESETS: dict[str, Preset] = {name: _load(name) for name in _names()}


def get_preset(name: object, key: str = "--preset") -> Preset:
    try:
        return PRESETS[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ConfigError(key, name, f"one of {', '.join(PRESETS)}") from None
