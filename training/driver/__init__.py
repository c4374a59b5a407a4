"""The driver side of a run, on the user's machine: everything ``python -m gke_ray_tpu.training.submit`` and
``python -m gke_ray_tpu.training.report`` use and the Ray workers never import.

- ``request``: the command line as a typed request; ``submission``: the job it becomes.
- ``stack_outputs``: the stack outputs the job is built from.
- ``port_forward``: the Ray dashboard through the Kubernetes API (never exposed).
- ``local_ray``: a throwaway Ray head on 127.0.0.1 for the local run.
- ``jobs_client``: the Ray Jobs API, one job per run attempt; ``retry``: transient errors.
- ``run_cluster``: on a stack that scales to zero, each run a RayJob with its own RayCluster.
- ``progress``: training progress read from the job's log; ``errors``: ClusterError.
"""
