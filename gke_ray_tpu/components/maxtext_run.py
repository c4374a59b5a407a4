"""MaxTextRun: a training run declared as code, a KubeRay RayJob.

The job is the one ``python -m gke_ray_tpu.training.submit`` builds (``gke_ray_tpu.core.job_spec``:
the same preset, overrides, defaults, entry point and runtime env), submitted
by the KubeRay operator instead of a person:

* On a RayTpuCluster that holds its slices, ``clusterSelector`` targets its
  RayCluster, which the RayJob neither owns nor deletes
  (``shutdownAfterJobFinishes`` stays false). On one that scales to zero the
  RayJob brings its own RayCluster (``gke_ray_tpu.core.kuberay.run_ray_job``) and KubeRay
  deletes it when the job ends, whatever the outcome.
* ``submissionMode: HTTPMode``: the operator posts the job to the head's Jobs
  API itself. The default, K8sJobMode, would start a submitter pod that pulls
  the Ray TPU image (tens of GB, and pulled on every start for a moving tag)
  only to run ``ray job submit``.
* The code: the operator has no files of its own, so this component uploads
  ``gke_ray_tpu/core/`` and ``gke_ray_tpu/training/`` as one zip into the checkpoint bucket, named by
  its content digest; every Ray pod mounts the bucket at ``/data`` and the
  job's runtime env puts the zip on ``PYTHONPATH``. The entry point first checks the zip
  against its SHA-256 (gke_ray_tpu.core.code_archive.verifier_command), so a zip replaced in the bucket
  is refused, not imported.
* Checkpoints and metrics go to ``gs://<bucket>/<run>/`` directly, as with the
  submit command (``gke_ray_tpu.core.job_spec.DATA_MOUNT`` says why not through ``/data``).
* ``jobId``: ``maxtext-<run>-rayjob-<digest>``. KubeRay submits an id once and
  ignores later spec changes, so any change of the command or the code is a new
  Ray job of the same run (Pulumi replaces the RayJob), which resumes from the
  run's checkpoints.
* ``backoffLimit``: retries, each on a new cluster, so only a run with its own
  cluster may have more than 0; with ``clusterSelector`` KubeRay rejects more
  (and older releases deleted the selected RayCluster on a retry). Restarts
  also happen inside the job, by Ray Train (``max_failures``).
* Deleting the RayJob (removing the run, ``pulumi destroy``) stops its Ray job:
  KubeRay's finalizer asks the cluster to stop it. The checkpoints stay in the
  bucket.
"""

from typing import Any, Mapping, NotRequired, Optional, TypedDict

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import yaml

from gke_ray_tpu.components._args import integer
from gke_ray_tpu.components._options import child_options
from gke_ray_tpu.components._refs import resolve_ref
from gke_ray_tpu.components.ray_tpu_cluster import RayTpuCluster, RayTpuClusterRef
from gke_ray_tpu.core import code_archive
from gke_ray_tpu.core.capacity import check_mode
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kuberay import run_cluster_name_pattern, run_ray_job
from gke_ray_tpu.core.job_spec import (
    COMPILATION_CACHE_DIR, DATA_MOUNT, JobSpec, bucket_url, build_job, declared_submission_id, entrypoint,
    run_location, runtime_env,
)
from gke_ray_tpu.core.naming import DNS_LABEL, RAY_CLUSTER_NAME, RAY_JOB_NAME, RAY_TPU_CLUSTER_NAME, check_bucket_name
from gke_ray_tpu.core.tpu_catalogue import slice_shape
from gke_ray_tpu.core.presets import DEFAULT_PRESET, get_preset

SUBMISSION_MODE = "HTTPMode"


class MaxTextRunArgs(TypedDict):
    """Inputs of MaxTextRun."""

    run_name: str
    """The run: the RayJob's name and MaxText's run_name (checkpoints under gs://<bucket>/<run_name>/checkpoints). A DNS-1035 label of at most 47 characters."""
    ray_cluster: RayTpuClusterRef
    """The RayTpuCluster the run runs on: the RayJob goes to its RayCluster and namespace, the code archive to its bucket, and the job takes its slices, their shape and capacity (on Spot a static run restarts up to 3 times; on slices scaled to zero Ray Train waits minutes for them). From Python, the component itself; from other languages, its fields."""
    preset: NotRequired[str]
    """A TPU training preset of gke_ray_tpu/core/presets. Default: llama3-8b."""
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
    if cluster["scale_to_zero"] and cluster.get("ray_cluster_spec") is None:
        raise ConfigError(
            f"{prefix}ray_cluster.ray_cluster_spec", None,
            "the RayTpuCluster's rayClusterSpec: on a cluster that scales to zero each run brings a RayCluster of it",
        )
    if cluster["scale_to_zero"] and slice_shape(cluster["generation"], cluster["topology"]).multi_host:
        # The run's own cluster takes its name, and the TPU webhook's limit on a multi-host cluster's name.
        RAY_TPU_CLUSTER_NAME.check_derived(
            run_cluster_name_pattern(args["run_name"]), args["run_name"], f"{prefix}run_name",
            "the name KubeRay gives the run's own RayCluster, <run_name>-<5 random characters>",
        )
    backoff = integer(args.get("backoff_limit", 0), 0, None, f"{prefix}backoff_limit")
    if backoff and not cluster["scale_to_zero"]:
        raise ConfigError(
            f"{prefix}backoff_limit", backoff,
            "0 on a cluster that holds its slices: KubeRay refuses RayJob retries on an existing RayCluster (older "
            "releases deleted it to retry), and Ray Train restarts the run inside its job (max_failures, 3 when elastic "
            "or on Spot); retries, each on a new cluster, need scaleToZero",
        )
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


def _job_fields(spec: JobSpec, code_sha256: str, mount: str, cold_start: bool) -> dict:
    """What KubeRay submits: the command, its runtime env (the code archive on PYTHONPATH) and the Ray job id.

    ``code_sha256``: the code archive's full content hash (gke_ray_tpu.core.code_archive.sha256); the entry point
    refuses an archive that does not match it before anything imports from it.
    """
    archive, command = code_archive.checked_job(entrypoint(spec), code_sha256, mount)
    env = runtime_env(pythonpath=archive, cold_start=cold_start)
    return {
        "entrypoint": command,
        "runtime_env_yaml": yaml.safe_dump(env, sort_keys=True),
        "job_id": declared_submission_id(spec.run_name, command, env),
    }


def per_run_ray_job(
    spec: JobSpec, name: str, namespace: str, ray_cluster_spec: Mapping, code_sha256: str,
    active_deadline_seconds: Optional[int] = None, backoff_limit: int = 0, mount: str = DATA_MOUNT,
) -> dict:
    """The RayJob manifest of a job that brings its own RayCluster of ``ray_cluster_spec`` (pure).

    Its slices start with the cluster, so Ray Train gets the cold start's timeouts (gke_ray_tpu.core.job_spec.runtime_env).
    """
    return run_ray_job(
        name, namespace, ray_cluster_spec, **_job_fields(spec, code_sha256, mount, cold_start=True),
        backoff_limit=backoff_limit, active_deadline_seconds=active_deadline_seconds,
    )


def ray_job(
    spec: JobSpec, name: str, namespace: str, ray_cluster_name: pulumi.Input[str], code_sha256: str,
    active_deadline_seconds: Optional[int] = None, mount: str = DATA_MOUNT,
) -> dict:
    """The RayJob manifest of a job on the long-lived RayCluster ``ray_cluster_name`` (pure).

    ``mount``: where the Ray pods see the bucket that holds the code archive.
    """
    fields = _job_fields(spec, code_sha256, mount, cold_start=False)
    manifest: dict = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "entrypoint": fields["entrypoint"],
            "runtimeEnvYAML": fields["runtime_env_yaml"],
            "jobId": fields["job_id"],
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
        deadline = args.get("active_deadline_seconds")
        if cluster["scale_to_zero"]:
            manifest = pulumi.Output.from_input(cluster["ray_cluster_spec"]).apply(
                lambda cluster_spec: per_run_ray_job(
                    spec, args["run_name"], cluster["namespace"], cluster_spec, content_hash, deadline,
                    int(args.get("backoff_limit", 0)),
                )
            )
            # The job id is a digest of the command and its env, neither of which depends on the cluster's outputs.
            job_id = _job_fields(spec, content_hash, DATA_MOUNT, cold_start=True)["job_id"]
            metadata = {"name": args["run_name"], "namespace": cluster["namespace"]}
        else:
            plain = ray_job(spec, args["run_name"], cluster["namespace"], cluster["ray_cluster_name"], content_hash, deadline)
            manifest, job_id, metadata = pulumi.Output.from_input(plain), plain["spec"]["jobId"], plain["metadata"]
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
        self.submission_id = pulumi.Output.from_input(job_id)
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
