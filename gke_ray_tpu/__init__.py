"""gke-ray-tpu: Pulumi components for multislice and elastic Ray Train (MaxText) on GKE TPU slices.

The packages' source sits at the repository's root and installs under this name (pyproject.toml's
``package-dir``), so nothing but ``gke_ray_tpu`` reaches site-packages:

- ``gke_ray_tpu.core`` (``core/``): pure facts and math (TPU catalogue, naming rules, the job spec, sharding).
- ``gke_ray_tpu.components`` (``components/``): the Pulumi ComponentResources (the library other stacks import).
- ``gke_ray_tpu.preflight`` (``preflight/``): HBM, step time, cost, XLA's compile check, the cold start.
- ``gke_ray_tpu.stack`` (``stack/``): this repository's program: its config model and the offline preview.
- ``gke_ray_tpu.training`` (``training/``): the job (the trainer on Ray) and the commands that submit and report it.

This file is the namespace's only one: importing it imports none of them, and a run's code archive carries it
beside ``core`` and ``training``, all the Ray workers load.
"""
