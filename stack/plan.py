"""What the stack plans before anything exists, derived once from its validated config: the spec of its
RayTpuCluster, the cluster and queue as its runs see them, the XLA flags its TPU pods get, and each declared run's
job.

``parse_stack_config`` checks the keys; :func:`plan_stack` then builds every declared run the way the submit
command would (``gke_ray_tpu.components.maxtext_run.build_run_job``, same rules), so a run that cannot be built fails
before anything is registered, under the key of the run that sets it. Preview's checks read the plan; ``pulumi up``
hands the components their arguments (``stack/wiring.py``), and each MaxTextRun builds its job again from the
RayTpuCluster it is given, as any library user's does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from gke_ray_tpu.components import ray_manifests, ray_tpu_cluster, tpu_queue
from gke_ray_tpu.components.gcs_workload_identity import GcsWorkloadIdentityRef
from gke_ray_tpu.components.maxtext_run import build_run_job
from gke_ray_tpu.components.ray_manifests import RayClusterSpec
from gke_ray_tpu.components.ray_tpu_cluster import RayTpuClusterRef
from gke_ray_tpu.components.tpu_queue import TpuQueueArgs, TpuQueueRef
from gke_ray_tpu.core import kueue
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import JobSpec
from gke_ray_tpu.preflight.xla_check import pod_flags
from gke_ray_tpu.stack import wiring
from gke_ray_tpu.stack.config import DeclaredRun, StackConfig, config_key


@dataclass(frozen=True)
class StackPlan:
    cfg: StackConfig
    cluster_spec: RayClusterSpec
    """The stack's RayTpuCluster with the component's defaults: what its pods get."""
    ray_cluster: RayTpuClusterRef
    """The RayTpuCluster as its runs see it."""
    queue_args: Optional[TpuQueueArgs]
    """The TpuQueue's arguments (None on a stack that holds its slices)."""
    queue: Optional[TpuQueueRef]
    """The TpuQueue as its runs see it."""
    jobs: tuple[JobSpec, ...]
    """Each declared run's job, in the order of ``gke-ray-tpu:runs``."""

    @property
    def pod_flags(self) -> tuple[str, ...]:
        """The XLA flags the stack's TPU pods get, as the compile check compiles with them."""
        return pod_flags(self.cluster_spec.shape.generation.name, self.cluster_spec.dcn_interfaces)


def plan_stack(cfg: StackConfig) -> StackPlan:
    """The stack's plan; a declared run that cannot be built raises ConfigError under its key
    (``gke-ray-tpu:runs[0].minSlices``, ``gke-ray-tpu:runs[0].overrides.<MaxText key>``)."""
    identity = GcsWorkloadIdentityRef(bucket_name=cfg.bucket_name, ksa_name=cfg.ksa_name, namespace=cfg.namespace)
    spec = ray_tpu_cluster.spec_from_args(wiring.ray_cluster_args(cfg, identity))
    ray_cluster = ray_tpu_cluster.cluster_ref(spec, spec.name, ray_manifests.ray_cluster_spec(spec))
    queue_args = wiring.queue_args(cfg, ray_cluster)
    queue = None
    if queue_args is not None:
        names = kueue.queue_names(spec.name, spec.namespace, "TpuQueueArgs.ray_cluster")
        queue = tpu_queue.queue_ref(names.local_queue, tpu_queue.wait_settings(queue_args))
    jobs = tuple(_declared_job(cfg, index, ray_cluster, queue) for index in range(len(cfg.runs)))
    return StackPlan(cfg, spec, ray_cluster, queue_args, queue, jobs)


def _declared_job(cfg: StackConfig, index: int, ray_cluster: RayTpuClusterRef, queue: Optional[TpuQueueRef]) -> JobSpec:
    """The job of declared run ``index``, its errors under the key of the run that sets it."""
    run = cfg.runs[index]
    at = f"{config_key('runs')}[{index}]"
    try:
        return build_run_job(wiring.run_args(cfg, index, ray_cluster, queue))
    except ConfigError as error:
        field = DeclaredRun.model_fields.get(error.key.removeprefix("MaxTextRunArgs."))
        if field is not None:  # an argument the run sets
            raise error.renamed(f"{at}.{field.alias}") from None
        # A MaxText key of the run's own overrides, else one its preset sets.
        mine = [part for part in re.split(r"[*,]", error.key) if part in run.overrides]
        where = f"{at}.overrides.{error.key}" if mine else f"{at} ({error.key} of preset {run.preset})"
        raise error.renamed(where) from None
