"""MaxTextRun: a training run declared as code, a KubeRay RayJob on an existing RayCluster.

The job is the one ``python -m training.submit`` builds (``core.job_spec``:
the same preset, overrides, defaults, entry point and runtime env), submitted
by the KubeRay operator instead of a person:

* ``clusterSelector`` targets the stack's RayCluster, which the RayJob neither
  owns nor deletes (``shutdownAfterJobFinishes`` stays false).
* ``submissionMode: HTTPMode``: the operator posts the job to the head's Jobs
  API itself. The default, K8sJobMode, would start a submitter pod that pulls
  the Ray TPU image (tens of GB, and pulled on every start for a moving tag)
  only to run ``ray job submit``.
* The code: the operator has no files of its own, so this component uploads
  ``core/`` and ``training/`` as one zip into the checkpoint bucket, named by
  its content digest; every Ray pod mounts the bucket at ``/data`` and the
  job's runtime env puts the zip on ``PYTHONPATH``. The entry point first checks the zip
  against its SHA-256 (core.code_archive.verifier_command), so a zip replaced in the bucket
  is refused, not imported.
* Checkpoints and metrics go to ``gs://<bucket>/<run>/`` directly, as with the
  submit command (``core.job_spec.DATA_MOUNT`` says why not through ``/data``).
* ``jobId``: ``maxtext-<run>-rayjob-<digest>``. KubeRay submits an id once and
  ignores later spec changes, so any change of the command or the code is a new
  Ray job of the same run (Pulumi replaces the RayJob), which resumes from the
  run's checkpoints.
* ``backoffLimit`` is always 0: with ``clusterSelector`` KubeRay rejects more
  (and older releases deleted the selected RayCluster on a retry). Restarts
  happen inside the job, by Ray Train (``max_failures``).
* Deleting the RayJob (removing the run, ``pulumi destroy``) stops its Ray job:
  KubeRay's finalizer asks the cluster to stop it. The checkpoints stay in the
  bucket.
"""

from typing import Any, Mapping, NotRequired, Optional, TypedDict

import pulumi
import pulumi_gcp as gcp
import yaml

from components._args import integer
from components._options import child_options, custom_resource
from components._refs import resolve_ref
from components.ray_tpu_cluster import RayTpuCluster, RayTpuClusterRef
from core import code_archive
from core.capacity import check_mode
from core.errors import ConfigError
from core.job_spec import (
    COMPILATION_CACHE_DIR, DATA_MOUNT, JobSpec, bucket_url, build_job, declared_submission_id, entrypoint,
    run_location, runtime_env,
)
from core.naming import DNS_LABEL, RAY_CLUSTER_NAME, RAY_JOB_NAME, check_bucket_name
from core.presets import DEFAULT_PRESET, get_preset

SUBMISSION_MODE = "HTTPMode"


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


def run_cluster(args: MaxTextRunArgs, prefix: str = "MaxTextRunArgs.") -> RayTpuClusterRef:
    """The RayTpuCluster the run is on, as its fields."""
    return resolve_ref(args["ray_cluster"], RayTpuCluster, f"{prefix}ray_cluster")  # type: ignore[return-value]


def build_run_job(args: MaxTextRunArgs, prefix: str = "MaxTextRunArgs.") -> JobSpec:
    """The run's job, with every rule the submit command applies (raises ConfigError)."""
    cluster = run_cluster(args, prefix)
    RAY_JOB_NAME.check(args["run_name"], f"{prefix}run_name")
    if isinstance(cluster["ray_cluster_name"], str):
        RAY_CLUSTER_NAME.check(cluster["ray_cluster_name"], f"{prefix}ray_cluster.ray_cluster_name")
    DNS_LABEL.check(cluster["namespace"], f"{prefix}ray_cluster.namespace")
    check_mode(cluster["capacity"], f"{prefix}ray_cluster.capacity")
    preset = get_preset(args.get("preset", DEFAULT_PRESET), key=f"{prefix}preset")
    bucket = cluster["bucket_name"]
    if not isinstance(bucket, str):
        raise ConfigError(
            f"{prefix}ray_cluster.bucket_name", bucket,
            "the bucket's name as known when the program runs, not another resource's output: the run's command "
            "names the bucket and its Ray job id is a digest of the command",
        )
    check_bucket_name(bucket, f"{prefix}ray_cluster.bucket_name")
    if preset.backend != "tpu":
        raise ConfigError(f"{prefix}preset", preset.name, "a TPU preset")
    if args.get("active_deadline_seconds") is not None:
        integer(args["active_deadline_seconds"], 1, None, f"{prefix}active_deadline_seconds")
    elastic = bool(args.get("elastic", False)) or preset.elastic
    low, high = int(cluster["elastic_min_slices"]), int(cluster["num_slices"])
    min_slices = integer(args.get("min_slices", low), 1, None, f"{prefix}min_slices")
    if elastic and not low <= min_slices <= high:
        raise ConfigError(
            f"{prefix}min_slices", min_slices,
            f"an integer between elasticMinSlices ({low}) and numSlices ({high}) of the RayTpuCluster: "
            "the RayCluster keeps no fewer slices",
        )
    return build_job(
        preset,
        base_output_directory=bucket_url(bucket) + "/",
        run_name=args["run_name"],
        slices=high,
        overrides=dict(args.get("overrides") or {}),
        elastic=elastic,
        min_slices=min_slices,
        generation=cluster["generation"],
        topology=cluster["topology"],
        spot=cluster["capacity"] == "spot",
        compilation_cache_dir=COMPILATION_CACHE_DIR,
    )


def ray_job(
    spec: JobSpec, name: str, namespace: str, ray_cluster_name: pulumi.Input[str], code_sha256: str,
    active_deadline_seconds: Optional[int] = None, mount: str = DATA_MOUNT, cold_start: bool = False,
) -> dict:
    """The RayJob manifest of a job (pure): what KubeRay submits to the RayCluster.

    ``code_sha256``: the code archive's full content hash (core.code_archive.sha256); the entry point
    refuses an archive that does not match it before anything imports from it.
    ``mount``: where the Ray pods see the bucket that holds the code archive.
    ``cold_start``: the RayCluster scales its slices to zero (core.job_spec.runtime_env).
    """
    archive = code_archive.archive_path(code_sha256[:code_archive.DIGEST_CHARS], mount)
    env = runtime_env(pythonpath=archive, cold_start=cold_start)
    command = f"{code_archive.verifier_command(archive, code_sha256)} && {entrypoint(spec)}"
    manifest: dict = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "entrypoint": command,
            "runtimeEnvYAML": yaml.safe_dump(env, sort_keys=True),
            "jobId": declared_submission_id(spec.run_name, command, env),
            "clusterSelector": {"ray.io/cluster": ray_cluster_name},
            "submissionMode": SUBMISSION_MODE,
            "backoffLimit": 0,
            "shutdownAfterJobFinishes": False,
        },
    }
    if active_deadline_seconds is not None:
        manifest["spec"]["activeDeadlineSeconds"] = int(active_deadline_seconds)
    return manifest


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
    """The Ray job id KubeRay submits (python -m training.submit --follow <run_name> finds it)."""
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
        manifest = ray_job(spec, args["run_name"], cluster["namespace"], cluster["ray_cluster_name"], content_hash,
                           args.get("active_deadline_seconds"), cold_start=bool(cluster["scale_to_zero"]))
        self.ray_job = custom_resource(
            f"{name}-rayjob",
            manifest,
            # KubeRay ignores spec changes once it submitted: a changed run is a new RayJob (same name).
            child_options(self, opts, depends_on=[self.code], replace_on_changes=["spec"], delete_before_replace=True),
        )
        # Tied to the resource, so a consumer of the name waits for the RayJob to exist.
        self.ray_job_name = self.ray_job.urn.apply(lambda _: args["run_name"])
        self.submission_id = pulumi.Output.from_input(manifest["spec"]["jobId"])
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
