"""This repository's program: its config read and planned, the components' arguments wired from it, preview's
checks, and the offline preview.

- ``config``: the key table (StackConfig, DeclaredRun); ``derived``: what the keys imply; ``cross_keys``: rules
  across keys; ``config_errors``: a refused value in words; ``parse``: a stack's raw config read through all four.
- ``plan``: the planned RayTpuCluster, queue and declared runs' jobs, derived once; ``wiring``: each component's
  arguments; ``component_keys``: a component's error under the key behind its argument.
- ``checks``: preview's checks, the config read into ``gke_ray_tpu.preflight``'s reports; ``permissions``: the
  roles ``pulumi up`` needs; ``preview``, ``mock_engine``, ``resource_tree``, ``readme``: the offline preview, its
  engine and what it prints.

``__main__.py`` (what ``pulumi up`` runs) composes the components from here; nothing else imports it.
"""
