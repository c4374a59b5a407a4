"""The training half: MaxText under Ray Train's JaxTrainer, submitted after deploy.

- ``training.trainer``: the job's entry point on the Ray head (static or elastic).
- ``training.submit``: the post-deploy command (``python -m training.submit``).
- ``training.presets``: the tutorial's runs as data; ``training.parallelism``:
  the sharding check shared with the planner.

Nothing here imports Pulumi at module level: the trainer runs on Ray nodes.
"""
