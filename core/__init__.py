"""Pure facts and math that every other package builds on: no Pulumi, no Ray, no JAX.

- ``core.tpu_catalogue``: TPU generations and slice shapes on GKE.
- ``core.gke``: GKE versions, the DRANET minimums, what a cluster must have.
- ``core.naming``: Google's and Kubernetes' naming rules.
- ``core.maxtext``: the MaxText keys this project reads (defaults, types, rules).
- ``core.presets``: the tutorial's runs as YAML overlays.
- ``core.parallelism``: the sharding check (mesh axes against slices).
- ``core.job_spec``: the trainer's command line, the job's submission id and runtime env.
- ``core.estimates``: HBM, FLOPs / step time and cost estimates.
- ``core.errors``: ConfigError.

``components/`` (the Pulumi library), ``stack/`` (this repository's program)
and ``training/`` (the job) import from here; nothing here imports them.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout: where Pulumi.yaml, pyproject.toml and the local run directories are."""
