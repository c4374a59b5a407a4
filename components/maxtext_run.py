"""MaxTextRun: a training run declared as code, a KubeRay RayJob.

The job is the one ``python -m gke_ray_tpu.training.submit`` builds (``gke_ray_tpu.core.job_spec``:
the same preset, overrides, defaults, entry point and runtime env), submitted
by the KubeRay operator instead of a person, and its RayJob comes from the one
builder every RayJob of the project comes from (``gke_ray_tpu.core.ray_job``,
which says why HTTPMode, what a run's own cluster is, and when retries are allowed):

* On a RayTpuCluster that holds its slices, ``clusterSelector`` targets its
  RayCluster, which the RayJob neither owns nor deletes. On one that scales to
  zero the RayJob brings its own RayCluster and KubeRay deletes it when the job
  ends, whatever the outcome; with a ``queue`` (the stack's TpuQueue) Kueue
  starts it when the chips are free, and an elastic run's cluster starts on its
  minimum and grows (``gke_ray_tpu.core.ray_job.elastic_cluster``).
* The code: the operator has no files of its own, so this component uploads
  ``core/`` and ``training/`` as one zip into the checkpoint bucket, named by
  its content digest; every Ray pod mounts the bucket at ``/data`` and the
  job's runtime env puts the zip on ``PYTHONPATH``. The entry point first checks the zip
  against its SHA-256 (gke_ray_tpu.core.code_archive.verifier_command), so a zip replaced in the bucket
  is refused, not imported.
* Checkpoints and metrics go to ``gs://<bucket>/<run>/`` directly, as with the
  submit command (``gke_ray_tpu.core.job_spec.DATA_MOUNT`` says why not through ``/data``).
* ``jobId``: ``maxtext-<run>-rayjob-<digest>``. KubeRay submits an id once and
  ignores later spec changes, so any change of the command or the code is a new
  Ray job of the same run (Pulumi replaces the RayJob), which resumes from the
  run's checkpoints. Restarts also happen inside the job, by Ray Train (``max_failures``).
* Deleting the RayJob (removing the run, ``pulumi destroy``) stops its Ray job:
  KubeRay's finalizer asks the cluster to stop it. The checkpoints stay in the
  bucket.
"""

from dataclasses import replace
from typing import Any, Mapping, NotRequired, Optional, TypedDict

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from gke_ray_tpu.components._options import child_options
from gke_ray_tpu.components._refs import resolve_ref
from gke_ray_tpu.components.ray_tpu_cluster import RayTpuCluster, RayTpuClusterRef
from gke_ray_tpu.components.tpu_queue import TpuQueue, TpuQueueRef
from gke_ray_tpu.core import code_archive, kueue, kueue_waiting
from gke_ray_tpu.core.capacity import capacity_mode
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import COMPILATION_CACHE_DIR, DATA_MOUNT, JobSpec, bucket_url, build_job, run_location
from gke_ray_tpu.core.naming import DNS_LABEL, RAY_CLUSTER_NAME, RAY_JOB_NAME, RAY_TPU_CLUSTER_NAME, check_bucket_name
from gke_ray_tpu.core.presets import DEFAULT_PRESET, get_preset
from gke_ray_tpu.core.ray_job import (
    ACTIVE_DEADLINE_SECONDS, DEFAULT_PRE_RUNNING_DEADLINE_SECONDS, HeldCluster, OwnCluster, RayJobRun, archived_command,
    check_backoff_limit, own_cluster_name_pattern, ray_job,
)
from gke_ray_tpu.core.slices import run_min_slices
from gke_ray_tpu.core.tpu_catalogue import slice_shape


class MaxTextRunArgs(TypedDict):
    """Inputs of MaxTextRun."""

    run_name: str
    """The run: the RayJob's name and MaxText's run_name (checkpoints under gs://<bucket>/<run_name>/checkpoints). A DNS-1035 label of at most 47 characters."""
    ray_cluster: RayTpuClusterRef
    """The RayTpuCluster the run runs on: the RayJob goes to its RayCluster and namespace, the code archive to its bucket, and the job takes its slices, their shape and capacity (on Spot a static run restarts up to 3 times; on slices scaled to zero Ray Train waits minutes for them). From Python, the component itself; from other languages, its fields."""
    preset: NotRequired[str]
    """A TPU training preset of core/presets. Default: llama3-8b."""
    overrides: NotRequired[Mapping[str, Any]]
    """MaxText keys over the preset's, as typed values (e.g. {"steps": 20})."""
    elastic: NotRequired[bool]
    """Train on min_slices..num_slices slices, restarting on fewer after a lost slice. Default: the preset's."""
    min_slices: NotRequired[int]
    """Fewest slices of an elastic run, at least the cluster's elastic_min_slices (fewer slices it does not keep). Default: the cluster's elastic_min_slices."""
    active_deadline_seconds: NotRequired[int]
    """Seconds after which KubeRay marks the RayJob failed (DeadlineExceeded). Unset: no deadline."""
    backoff_limit: NotRequired[int]
    """Retries of a failed run, each on a new RayCluster: only on a RayTpuCluster that scales to zero (KubeRay refuses retries on a shared RayCluster). Default: 0."""
    queue: NotRequired[TpuQueueRef]
    """The TpuQueue of a RayTpuCluster that scales to zero: the run waits in it until its chips are free, its slices must all be up within Kueue's timeout, and an elastic run starts on its minimum and grows. From Python, the component itself; from other languages, its fields."""


def run_cluster(args: MaxTextRunArgs, prefix: str = "MaxTextRunArgs.") -> RayTpuClusterRef:
    """The RayTpuCluster the run is on, as its fields."""
    return resolve_ref(args["ray_cluster"], RayTpuCluster, f"{prefix}ray_cluster")  # type: ignore[return-value]


def run_queue(args: MaxTextRunArgs, prefix: str = "MaxTextRunArgs.") -> Optional[TpuQueueRef]:
    """The TpuQueue the run waits in, as its fields (None: no queue)."""
    if "queue" not in args:
        return None
    if not run_cluster(args, prefix)["scale_to_zero"]:
        raise ConfigError(f"{prefix}queue", args["queue"], "unset on a RayTpuCluster that holds its slices: its runs "
                                                           "go to its RayCluster, which Kueue does not queue")
    return resolve_ref(args["queue"], TpuQueue, f"{prefix}queue")  # type: ignore[return-value]


def build_run_job(args: MaxTextRunArgs, prefix: str = "MaxTextRunArgs.") -> JobSpec:
    """The run's job, with every rule the submit command applies (raises ConfigError)."""
    cluster = run_cluster(args, prefix)
    _check_names(args, cluster, prefix)
    mode = capacity_mode(cluster["capacity"], f"{prefix}ray_cluster.capacity")
    preset = get_preset(args.get("preset", DEFAULT_PRESET), key=f"{prefix}preset")
    if preset.backend != "tpu":
        raise ConfigError(f"{prefix}preset", preset.name, "a TPU preset")
    if args.get("active_deadline_seconds") is not None:
        ACTIVE_DEADLINE_SECONDS.check(args["active_deadline_seconds"], f"{prefix}active_deadline_seconds")
    check_backoff_limit(args.get("backoff_limit", 0), cluster["scale_to_zero"], f"{prefix}backoff_limit")
    run_queue(args, prefix)
    elastic = bool(args.get("elastic", False)) or preset.elastic
    min_slices = run_min_slices(args.get("min_slices"), int(cluster["elastic_min_slices"]), int(cluster["num_slices"]),
                                f"{prefix}min_slices") if elastic else None
    return build_job(
        preset,
        base_output_directory=bucket_url(cluster["bucket_name"]) + "/",
        run_name=args["run_name"],
        slices=int(cluster["num_slices"]),
        overrides=dict(args.get("overrides") or {}),
        elastic=elastic,
        min_slices=min_slices,
        generation=cluster["generation"],
        topology=cluster["topology"],
        spot=mode.spot,
        compilation_cache_dir=COMPILATION_CACHE_DIR,
    )


def _check_names(args: MaxTextRunArgs, cluster: RayTpuClusterRef, prefix: str) -> None:
    """The run's, its cluster's and its bucket's names, and the spec of the cluster a run brings, where it does."""
    RAY_JOB_NAME.check(args["run_name"], f"{prefix}run_name")
    if isinstance(cluster["ray_cluster_name"], str):
        RAY_CLUSTER_NAME.check(cluster["ray_cluster_name"], f"{prefix}ray_cluster.ray_cluster_name")
    DNS_LABEL.check(cluster["namespace"], f"{prefix}ray_cluster.namespace")
    bucket = cluster["bucket_name"]
    if not isinstance(bucket, str):
        raise ConfigError(
            f"{prefix}ray_cluster.bucket_name", bucket,
            "the bucket's name as known when the program runs, not another resource's output: the run's command "
            "names the bucket and its Ray job id is a digest of the command",
        )
    check_bucket_name(bucket, f"{prefix}ray_cluster.bucket_name")
    if not cluster["scale_to_zero"]:
        return
    if cluster.get("ray_cluster_spec") is None:
        raise ConfigError(
            f"{prefix}ray_cluster.ray_cluster_spec", None,
            "the RayTpuCluster's rayClusterSpec: on a cluster that scales to zero each run brings a RayCluster of it",
        )
    if slice_shape(cluster["generation"], cluster["topology"]).multi_host:
        # The run's own cluster takes its name, and the TPU webhook's limit on a multi-host cluster's name.
        RAY_TPU_CLUSTER_NAME.check_derived(
            own_cluster_name_pattern(args["run_name"]), args["run_name"], f"{prefix}run_name",
            "the name KubeRay gives the run's own RayCluster, <run_name>-<5 random characters>",
        )


def run_description(args: MaxTextRunArgs, spec: JobSpec, code_sha256: str, ray_cluster_spec: Any = None,
                    local_queue: Optional[str] = None, mount: str = DATA_MOUNT) -> RayJobRun:
    """The run as a RayJob (``gke_ray_tpu.core.ray_job.ray_job`` builds its manifest), pure.

    ``code_sha256``: the code archive's full content hash (gke_ray_tpu.core.code_archive.sha256). On a cluster
    that scales to zero, ``ray_cluster_spec`` is the spec the run brings (or a Pulumi Input of it) and
    ``local_queue`` the LocalQueue of its ``queue`` (it is queued, its pre-running deadline lies past Kueue's
    timeout, and an elastic run starts on its minimum); ``mount``: where the Ray pods see the bucket that holds the
    code archive."""
    cluster = run_cluster(args)
    own = bool(cluster["scale_to_zero"])
    queue = run_queue(args)
    where: Any = HeldCluster(cluster["ray_cluster_name"])
    deadline = None
    if own:
        start = spec.min_slices if queue is not None and spec.elastic else None
        where = OwnCluster(ray_cluster_spec, spec.slices, start_slices=start)
        deadline = (kueue_waiting.queued_pre_running_deadline(queue.get("pods_ready_timeout_s")) if queue is not None
                    else DEFAULT_PRE_RUNNING_DEADLINE_SECONDS)
    return RayJobRun(
        name=args["run_name"],
        namespace=cluster["namespace"],
        command=archived_command(spec, code_sha256, cold_start=own, mount=mount),
        cluster=where,
        backoff_limit=int(args.get("backoff_limit", 0)),
        active_deadline_seconds=args.get("active_deadline_seconds"),
        pre_running_deadline_seconds=deadline,
        labels=kueue.queue_label(local_queue) if local_queue is not None else {},
    )


class MaxTextRun(pulumi.ComponentResource):
    """A MaxText training run on a RayCluster, applied by pulumi up and stopped by removing it.

    Needs a Kubernetes provider for the cluster (opts providers). The RayJob
    and the code archive wait for the RayCluster through its name, and the
    RayCluster for the bucket's Workload Identity bindings, as which the pods
    read the code and write checkpoints.
    """

    ray_job_name: pulumi.Output[str]
    """The RayJob's name."""
    submission_id: pulumi.Output[str]
    """The Ray job id KubeRay submits (python -m gke_ray_tpu.training.submit --follow <run_name> finds it)."""
    checkpoint_dir: pulumi.Output[str]
    """Where MaxText writes the run's checkpoints."""
    code_object: pulumi.Output[str]
    """The code archive's object in the bucket."""

    def __init__(self, name: str, args: MaxTextRunArgs, opts: Optional[pulumi.ResourceOptions] = None):
        spec = build_run_job(args)
        cluster = run_cluster(args)
        files = code_archive.package_files()
        content_hash = code_archive.sha256(files)
        digest = content_hash[:code_archive.DIGEST_CHARS]
        super().__init__("gke-ray-tpu:index:MaxTextRun", name, None, opts)
        self.spec = spec

        self.code = gcp.storage.BucketObject(
            f"{name}-code",
            # The bucket's name is plain (the job's command names it): the upload waits for the bucket
            # through the RayCluster, which waits for the bucket's Workload Identity bindings.
            bucket=pulumi.Output.from_input(cluster["ray_cluster_name"]).apply(lambda _: cluster["bucket_name"]),
            name=code_archive.archive_object(digest),
            source=pulumi.AssetArchive({arcname: pulumi.FileAsset(str(path)) for arcname, path in files.items()}),
            content_type="application/zip",
            opts=child_options(self, opts),
        )
        queue = run_queue(args)
        run = run_description(args, spec, content_hash, cluster.get("ray_cluster_spec"))
        metadata: Any = run.metadata  # known now, whatever the cluster's outputs: the job id does not depend on them either
        if isinstance(run.cluster, OwnCluster):
            # The RayJob waits for the spec of its cluster and for its queue (through the LocalQueue's name).
            local_queue = queue["local_queue"] if queue is not None else None
            manifest = pulumi.Output.all(run.cluster.spec, local_queue).apply(
                lambda resolved: ray_job(replace(
                    run, cluster=replace(run.cluster, spec=resolved[0]),
                    labels=kueue.queue_label(resolved[1]) if resolved[1] is not None else {})))
            if queue is not None:
                metadata = manifest.apply(lambda m: m["metadata"])
        else:
            manifest = pulumi.Output.from_input(ray_job(run))
        self.ray_job = k8s.apiextensions.CustomResource(
            f"{name}-rayjob",
            api_version="ray.io/v1",
            kind="RayJob",
            metadata=metadata,
            spec=manifest.apply(lambda m: m["spec"]),
            # KubeRay ignores spec changes once it submitted: a changed run is a new RayJob (same name).
            opts=child_options(self, opts, depends_on=[self.code], replace_on_changes=["spec"], delete_before_replace=True),
        )
        # Tied to the resource, so a consumer of the name waits for the RayJob to exist.
        self.ray_job_name = self.ray_job.urn.apply(lambda _: args["run_name"])
        self.submission_id = pulumi.Output.from_input(run.command.job_id)
        self.checkpoint_dir = pulumi.Output.from_input(run_location(spec, "checkpoints"))
        self.code_object = self.code.name
        self.register_outputs(
            {
                "rayJobName": self.ray_job_name,
                "submissionId": self.submission_id,
                "checkpointDir": self.checkpoint_dir,
                "codeObject": self.code_object,
            }
        )
