"""The training half: MaxText under Ray Train's JaxTrainer, submitted after deploy.

- ``gke_ray_tpu.training.submit``: the post-deploy command (``python -m gke_ray_tpu.training.submit``).
- ``gke_ray_tpu.training.report``: a run's loss and throughput curves (``python -m gke_ray_tpu.training.report``).
- ``gke_ray_tpu.training.driver``: what those commands use on your machine (Jobs API, port-forward, progress).
- ``gke_ray_tpu.training.worker``: what runs on Ray (``python -m gke_ray_tpu.training.worker.trainer``).

The job itself (command line, presets, sharding check) is described in ``core``.
Nothing here imports Pulumi at module level.
"""
