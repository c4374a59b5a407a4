"""gke-ray-tpu: Pulumi components for multislice and elastic Ray Train (MaxText) on GKE TPU slices.

- ``gke_ray_tpu.core``: pure facts and math (TPU catalogue, naming rules, the job spec, estimates).
- ``gke_ray_tpu.components``: the Pulumi ComponentResources (the library other stacks import).
- ``gke_ray_tpu.stack``: this repository's program: its config model, preflight and offline preview.
- ``gke_ray_tpu.training``: the job (the trainer on Ray) and the commands that submit and report it.

Importing this package imports none of them: the Ray workers load only ``core`` and ``training``.
"""
