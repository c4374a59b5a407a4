"""Pure facts and math that every other package builds on: no Pulumi, no Ray, no JAX.

- ``gke_ray_tpu.core.tpu_catalogue``: TPU generations and slice shapes on GKE.
- ``gke_ray_tpu.core.gke``: GKE versions, the DRANET minimums, what a cluster must have.
- ``gke_ray_tpu.core.naming``: Google's and Kubernetes' naming rules.
- ``gke_ray_tpu.core.maxtext``: the MaxText keys this project reads (defaults, types, rules).
- ``gke_ray_tpu.core.presets``: the tutorial's runs as YAML overlays.
- ``gke_ray_tpu.core.parallelism``: the sharding check (mesh axes against slices).
- ``gke_ray_tpu.core.job_spec``: the trainer's command line, the job's submission id and runtime env.
- ``gke_ray_tpu.core.estimates``: HBM, FLOPs / step time and cost estimates.
- ``gke_ray_tpu.core.errors``: ConfigError.

``gke_ray_tpu/components/`` (the Pulumi library), ``gke_ray_tpu/stack/`` (this repository's program)
and ``gke_ray_tpu/training/`` (the job) import from here; nothing here imports them.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout: where Pulumi.yaml, pyproject.toml and the local run directories are."""
