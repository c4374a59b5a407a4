"""Pure facts and math that every other package builds on: no Pulumi, no Ray, no JAX.

- ``gke_ray_tpu.core.tpu_catalogue``: TPU generations and slice shapes on GKE.
- ``gke_ray_tpu.core.gke``: GKE versions, the DRANET minimums, what a cluster must have.
- ``gke_ray_tpu.core.naming``: Google's and Kubernetes' naming rules.
- ``gke_ray_tpu.core.maxtext``: the MaxText keys this project reads (defaults, types, rules).
- ``gke_ray_tpu.core.models``: model shapes, read from the installed MaxText's model configs.
- ``gke_ray_tpu.core.presets``: the tutorial's runs as YAML overlays.
- ``gke_ray_tpu.core.parallelism``, ``gke_ray_tpu.core.sharding``: do the mesh keys fit the slices, and does the
  model shard over them (every job is validated with both, on the worker too).
- ``gke_ray_tpu.core.prices``: TPU and CPU list prices, with their sources.
- ``gke_ray_tpu.core.job_spec``: the trainer's command line, the job's submission id and runtime env.
- ``gke_ray_tpu.core.errors``: ConfigError.

``components/`` (the Pulumi library), ``preflight/`` (the checks before anything is paid for),
``training/`` (the job) and ``stack/`` (this repository's program) import from here; nothing here imports them.
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The checkout: where Pulumi.yaml, pyproject.toml and the local run directories are."""


def user_cache(part: str) -> Path:
    """``$XDG_CACHE_HOME/gke-ray-tpu/<part>`` (``~/.cache`` by default): what this machine keeps between commands,
    by content (XLA's verdicts, a submitted run's code), never in the checkout."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gke-ray-tpu" / part
