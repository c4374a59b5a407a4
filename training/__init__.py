"""The training half: MaxText under Ray Train's JaxTrainer, submitted after deploy.

- ``training.submit``: the post-deploy command (``python -m training.submit``).
- ``training.report``: a run's loss and throughput curves (``python -m training.report``).
- ``training.driver``: what those commands use on your machine (Jobs API, port-forward, progress).
- ``training.worker``: what runs on Ray (``python -m training.worker.trainer``).

The job itself (command line, presets, sharding check) is described in ``core``.
Nothing here imports Pulumi at module level.
"""
