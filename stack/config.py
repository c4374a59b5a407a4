"""The stack's config keys: each declared once, with its type, default, rule and description.

:class:`StackConfig` is the whole contract of ``Pulumi.<stack>.yaml``: each field carries its config key (the
alias), its default, its description (the config table of docs/deploy.md is rendered from them by
``stack/readme.py``, and a test keeps the two equal), its own rule, and the component arguments it feeds; a declared
run is a :class:`DeclaredRun` (whose job ``stack/plan.py`` builds, once). Defaults of the keys a component takes
come from that component's module, so the stack and the library cannot drift apart. The rules across keys are
``stack/cross_keys.py``'s, the values derived from the keys ``stack/derived.py``'s, and reading a config is
``stack/parse.py``'s.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Callable, Literal, Optional

from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Json, StrictBool, StrictInt, Strict, ValidationInfo,
    field_validator,
)

from gke_ray_tpu.components import (
    gcs_workload_identity, gke_cluster, ray_tpu_cluster, tpu_queue, tpu_slice_node_pool, worker_image,
)
from gke_ray_tpu.components.maxtext_run import MaxTextRunArgs
from gke_ray_tpu.core import capacity as capacity_rules, gke, kueue, naming, ray_job, slices
from gke_ray_tpu.core.kueue_waiting import WaitSettings
from gke_ray_tpu.core.bounds import Bounds
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.maxtext import check_settings
from gke_ray_tpu.core.presets import DEFAULT_PRESET, get_preset
from gke_ray_tpu.stack.derived import DerivedValues

NAMESPACE = "gke-ray-tpu"
GCP_KEYS = ("gcp:project", "gcp:region", "gcp:zone")
RETIRED_KEYS = {
    f"{NAMESPACE}:spot": f"{NAMESPACE}:capacity instead, which replaced it: `pulumi config rm {NAMESPACE}:spot`, then "
    f"`pulumi config set {NAMESPACE}:capacity spot` for Spot slices (on-demand is the default)",
    f"{NAMESPACE}:idleTimeoutSeconds": f"unset (`pulumi config rm {NAMESPACE}:idleTimeoutSeconds`): "
    + ray_tpu_cluster.IDLE_TIMEOUT_RETIRED,
}
"""Keys older stacks set, and what to write instead."""

_MACHINE_TYPE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)+")


def config_key(field: str) -> str:
    """The key the user sets for a StackConfig field (``gke-ray-tpu:numSlices`` for ``num_slices``)."""
    return StackConfig.key(field)


def feeds(*arguments: str, **extra: Any) -> dict:
    """A field's ``json_schema_extra``: the component arguments its value feeds (``RayTpuClusterArgs.num_slices``),
    from which ``gke_ray_tpu.stack.component_keys`` names the key behind an argument a component refuses."""
    return {"feeds": arguments, **extra}


def bounded(bounds: Bounds) -> Any:
    """A field's limits, from the Bounds the setting's owner declares (errors word them as ``Bounds.words``)."""
    return Field(ge=bounds.low, le=bounds.high)


# -- value types: config arrives as strings (JSON for lists and objects) ------------------------
# Pydantic coerces and bounds the values (ints from strings, JSON, choices as Literals); a failed
# check becomes a ConfigError under the user's key in _config_error, worded by _expected.


def _pulumi_bool(value: Any) -> Any:
    """Pulumi spells booleans true/false; any other string is left for the strict check to refuse (not "yes")."""
    return value.lower() == "true" if isinstance(value, str) and value.lower() in ("true", "false") else value


Flag = Annotated[bool, BeforeValidator(_pulumi_bool), Strict()]


def _rule(check: Callable[[Any, str], Any]) -> AfterValidator:
    """A rule that takes (value, config key) and raises ConfigError."""

    def apply(value: Any, info: ValidationInfo) -> Any:
        if value is not None:
            check(value, config_key(info.field_name))
        return value

    return AfterValidator(apply)


def _name(rule: naming.NameRule) -> AfterValidator:
    return _rule(rule.check)


def _pattern(pattern: re.Pattern, expected: str) -> AfterValidator:
    def check(value: str, key: str) -> None:
        if not pattern.fullmatch(value):
            raise ConfigError(key, value, expected)

    return _rule(check)


def _location(value: str, key: str) -> None:
    if not (naming.ZONE.matches(value) or naming.REGION.matches(value)):
        raise ConfigError(key, value, "a zone (us-east5-b) or a region (us-east5)")


def _version(value: str, key: str) -> None:
    gke.parse_version(value, key)


def _planned_preset(value: str, key: str) -> None:
    get_preset(value, key=key)


def _planned_overrides(value: dict, key: str) -> None:
    for name, item in value.items():
        if not isinstance(item, (str, int, float, bool)):
            raise ConfigError(f"{key}.{name}", item, "a string, number or boolean (a MaxText value)")
    check_settings(value, key=lambda name: f"{key}.{name}")


RUN_EXAMPLE = {"name": "baseline", "preset": DEFAULT_PRESET}


class DeclaredRun(BaseModel):
    """One training run declared in the stack (``gke-ray-tpu:runs``): ``pulumi up`` applies it as a RayJob.

    Its fields are a MaxTextRun's arguments, under the camelCase keys a user writes; the errors its
    rules raise name the field (``preset``), and the stack's error puts the run in front of it
    (``gke-ray-tpu:runs[0].preset``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_name: str = Field(
        alias="name", json_schema_extra={"expected": f"{naming.RAY_JOB_NAME.what}: {naming.RAY_JOB_NAME.description}"}
    )
    """The RayJob's name and MaxText's run_name: checkpoints go to gs://<bucket>/<name>/checkpoints."""
    preset: str = DEFAULT_PRESET
    overrides: dict = Field(default_factory=dict, json_schema_extra={"expected": 'an object of MaxText keys, e.g. {"steps": 20}'})
    min_slices: Annotated[Optional[StrictInt], bounded(slices.MIN_SLICES)] = Field(None, alias="minSlices")
    active_deadline_seconds: Annotated[Optional[StrictInt], bounded(ray_job.ACTIVE_DEADLINE_SECONDS)] = Field(
        None, alias="activeDeadlineSeconds"
    )
    backoff_limit: Annotated[Optional[StrictInt], bounded(ray_job.BACKOFF_LIMIT)] = Field(None, alias="backoffLimit")
    elastic: StrictBool = Field(False, validate_default=True)
    """Set, or implied by an elastic preset or by minSlices (declared last: it reads both)."""

    @field_validator("run_name")
    @classmethod
    def _job_name(cls, value: str) -> str:
        return naming.RAY_JOB_NAME.check(value, "name")

    @field_validator("preset")
    @classmethod
    def _tpu_preset(cls, value: str) -> str:
        preset = get_preset(value, key="preset")
        if preset.backend != "tpu":
            raise ConfigError("preset", preset.name, "a TPU preset (tiny-cpu is for the local run)")
        return preset.name

    @field_validator("overrides")
    @classmethod
    def _maxtext_keys(cls, value: dict) -> dict:
        _planned_overrides(value, "overrides")
        if "run_name" in value:
            raise ConfigError("overrides.run_name", value["run_name"], "unset: the run's name is its name")
        return value

    @field_validator("elastic")
    @classmethod
    def _implied_elastic(cls, value: bool, info: ValidationInfo) -> bool:
        preset = info.data.get("preset")
        return value or (preset is not None and get_preset(preset).elastic) or info.data.get("min_slices") is not None


def _distinct_names(runs: list[DeclaredRun], info: ValidationInfo) -> list[DeclaredRun]:
    names: set[str] = set()
    for index, run in enumerate(runs):
        if run.run_name in names:
            raise ConfigError(f"{config_key(info.field_name)}[{index}].name", run.run_name, "a name no other run of the stack has")
        names.add(run.run_name)
    return runs


def _project_number(value: str, key: str) -> None:
    # str.isdigit() takes any script's digits; the principal:// member IAM checks takes ASCII ones.
    if not re.fullmatch(r"[1-9][0-9]*", value):
        raise ConfigError(key, value, "digits only, e.g. 123456789012")


def _created_namespace(value: str, key: str) -> None:
    # The program creates a namespace other than default; the API refuses one that exists (AlreadyExists),
    # and every cluster has kube-system, kube-public and kube-node-lease (Kubernetes reserves kube-).
    if value.startswith("kube-"):
        raise ConfigError(key, value, "a namespace of your own: kube- names are Kubernetes' (kube-system, ...)")


class StackConfig(DerivedValues, BaseModel):
    """The stack's keys, each checked by its own rule; ``gke_ray_tpu.stack.parse.parse_stack_config`` makes one and
    checks the rules across keys (``stack/cross_keys.py``): everything ``__main__.py`` needs, already checked."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    project: Annotated[str, _name(naming.PROJECT_ID)] = Field(
        alias="gcp:project", description="the project everything is created in",
        json_schema_extra=feeds("GkeRayClusterArgs.project", "DcnNetworksArgs.project", "GcsWorkloadIdentityArgs.project",
                                "WorkerImageArgs.project"),
    )
    region: Annotated[str, _name(naming.REGION)] = Field(
        alias="gcp:region", description="the region of the subnets, the bucket and an Autopilot cluster",
        json_schema_extra=feeds("GkeRayClusterArgs.location", "DcnNetworksArgs.region", "GcsWorkloadIdentityArgs.location",
                                "WorkerImageArgs.location"),
    )
    zone: Annotated[Optional[str], _name(naming.ZONE)] = Field(
        None, alias="gcp:zone", description="the zone of the slices and of a Standard cluster; unset: `<region>-b`",
        json_schema_extra=feeds("TpuSliceNodePoolArgs.zone"),
    )
    cluster_name: Annotated[str, _name(naming.GKE_NAME)] = Field(
        "ray-tpu-multislice",
        alias="gke-ray-tpu:clusterName",
        description="GKE cluster name (1-40 characters); also prefixes the DCN networks (`<name>-net-<i>`), subnets and firewall rules",
        json_schema_extra=feeds("GkeRayClusterArgs.cluster_name", "DcnNetworksArgs.name_prefix", "WorkerImageArgs.repository"),
    )
    cluster_mode: Literal[gke.CLUSTER_MODES] = Field(
        gke_cluster.DEFAULT_MODE,
        alias="gke-ray-tpu:clusterMode",
        description="`standard`, or `autopilot`: a regional cluster, TPU nodes from a DRANET ComputeClass, no node pools or networks of ours",
        json_schema_extra=feeds("GkeRayClusterArgs.mode"),
    )
    cluster_version: Annotated[str, _rule(_version)] = Field(
        gke_cluster.DEFAULT_VERSION,
        alias="gke-ray-tpu:clusterVersion",
        description="a minor (`1.35`: the channel's newest patch of it) or an exact version (`1.35.2-gke.1842000`); at least the DRANET minimum, 1.34.1-gke.1829001 (Standard) or 1.35.2-gke.1842000 (Autopilot); preview checks GKE still offers it",
        json_schema_extra=feeds("GkeRayClusterArgs.version"),
    )
    release_channel: Literal[gke.RELEASE_CHANNELS] = Field(
        gke_cluster.DEFAULT_RELEASE_CHANNEL,
        alias="gke-ray-tpu:releaseChannel",
        description="`UNSPECIFIED` is allowed for Standard only",
        json_schema_extra=feeds("GkeRayClusterArgs.release_channel"),
    )
    deletion_protection: Flag = Field(
        True,
        alias="gke-ray-tpu:deletionProtection",
        description="the dev stack sets `false`; `pulumi destroy` of a protected cluster fails until you set it false and `pulumi up`",
        json_schema_extra=feeds("GkeRayClusterArgs.deletion_protection"),
    )
    existing_cluster_name: Annotated[Optional[str], _name(naming.GKE_NAME)] = Field(
        None,
        alias="gke-ray-tpu:existingClusterName",
        description="reuse this cluster: nothing of the cluster is created; preview checks it has Dataplane V2, the Workload Identity pool, the Ray operator and GCS FUSE add-ons and the DRANET version",
        json_schema_extra=feeds("GkeRayClusterArgs.cluster_name", "GkeRayClusterArgs.existing"),
    )
    existing_cluster_location: Annotated[Optional[str], _rule(_location)] = Field(
        None, alias="gke-ray-tpu:existingClusterLocation", description="the zone or region of `existingClusterName`; unset: `gcp:zone`",
        json_schema_extra=feeds("GkeRayClusterArgs.location"),
    )
    cpu_machine_type: Annotated[str, _pattern(_MACHINE_TYPE, "a Compute Engine machine type such as n1-standard-16")] = Field(
        gke_cluster.DEFAULT_CPU_MACHINE_TYPE,
        alias="gke-ray-tpu:cpuMachineType",
        description="the CPU pool for the Ray head (and, unless `scaleToZero`, the system pods) (Standard)",
        json_schema_extra=feeds("GkeRayClusterArgs.cpu_machine_type"),
    )
    cpu_node_count: Annotated[int, bounded(gke_cluster.CPU_NODE_COUNT)] = Field(
        gke_cluster.DEFAULT_CPU_NODE_COUNT,
        alias="gke-ray-tpu:cpuNodeCount",
        description=f"nodes of that pool, {gke_cluster.CPU_NODE_COUNT.low}-{gke_cluster.CPU_NODE_COUNT.high}; with `scaleToZero` it autoscales from 0 to this many (a Ray head per "
        f"node, one per running run) and one `{gke_cluster.SYSTEM_MACHINE_TYPE}` node runs GKE's system pods",
        json_schema_extra=feeds("GkeRayClusterArgs.cpu_node_count"),
    )
    enable_multi_networking: Flag = Field(
        False, alias="gke-ray-tpu:enableMultiNetworking", description="as in the tutorial; DRANET does not need it",
        json_schema_extra=feeds("GkeRayClusterArgs.enable_multi_networking"),
    )
    ray_cluster_logging: Flag = Field(
        gke_cluster.DEFAULT_RAY_CLUSTER_LOGGING,
        alias="gke-ray-tpu:rayClusterLogging",
        description="the Ray operator add-on sends the RayCluster's logs (every job's, every worker's) to Cloud Logging, "
        "where they outlive the cluster; billed at $0.50/GiB past 50 GiB per project and month (the local run's job log is ~0.4 MB, bench/bench_goodput.py; a TPU run's is larger and not measured here); "
        "a cluster the stack creates (an existing one keeps its own setting)",
        json_schema_extra=feeds("GkeRayClusterArgs.ray_cluster_logging"),
    )
    ray_cluster_monitoring: Flag = Field(
        gke_cluster.DEFAULT_RAY_CLUSTER_MONITORING,
        alias="gke-ray-tpu:rayClusterMonitoring",
        description="the Ray operator add-on sends the RayCluster's Ray metrics to Managed Service for Prometheus; "
        "billed per sample ingested, every day the cluster runs (docs/training.md: Logs and metrics); a cluster the stack creates",
        json_schema_extra=feeds("GkeRayClusterArgs.ray_cluster_monitoring"),
    )
    dcn_cidrs: Annotated[Optional[Json[list]], Field(examples=['["10.50.0.0/16", "10.60.0.0/16"]'])] = Field(
        None,
        alias="gke-ray-tpu:dcnCidrs",
        description='one DCN network each; private, /8-/29, disjoint, at most the NICs DRANET can hand out (2 on `ct6e-standard-4t`, 0 on v4/v5e/v5p); unset: `["10.50.0.0/16","10.60.0.0/16"]` cut to that many',
        json_schema_extra=feeds("DcnNetworksArgs.cidrs", "TpuSliceNodePoolArgs.additional_networks", "RayTpuClusterArgs.dcn_interfaces", "GkeRayClusterArgs.dranet"),
    )
    tpu_generation: str = Field(
        tpu_slice_node_pool.DEFAULT_GENERATION,
        alias="gke-ray-tpu:tpuGeneration",
        description="any generation of `core/tpu_catalogue.py`: v4, v5e, v5p, v6e, tpu7x",
        json_schema_extra=feeds("TpuSliceNodePoolArgs.generation", "RayTpuClusterArgs.generation"),
    )
    tpu_topology: str = Field(
        tpu_slice_node_pool.DEFAULT_TOPOLOGY,
        alias="gke-ray-tpu:tpuTopology",
        description="a topology of that generation; machine type, host count and chips per host are derived",
        json_schema_extra=feeds("TpuSliceNodePoolArgs.topology", "RayTpuClusterArgs.topology"),
    )
    num_slices: Annotated[int, bounded(slices.NUM_SLICES)] = Field(
        slices.DEFAULT_NUM_SLICES,
        alias="gke-ray-tpu:numSlices",
        description=f"one node pool and one RayCluster replica per slice, {slices.NUM_SLICES.low}-{slices.NUM_SLICES.high}; "
        "more than 1 needs a multi-host topology",
        json_schema_extra=feeds("RayTpuClusterArgs.num_slices"),
    )
    elastic_min_slices: Annotated[Optional[int], bounded(slices.MIN_SLICES)] = Field(
        None,
        alias="gke-ray-tpu:elasticMinSlices",
        description="the fewest slices an elastic run keeps training on (Ray Train's lower worker bound), 1 to `numSlices`; "
        "also the TPU worker group's `minReplicas`: the RayCluster's, or with `scaleToZero` that of each run's own cluster "
        "(at most the run's slices); unset: `numSlices`",
        json_schema_extra=feeds("RayTpuClusterArgs.elastic_min_slices"),
    )
    capacity: Literal[capacity_rules.CAPACITY_MODES] = Field(
        capacity_rules.DEFAULT_CAPACITY,
        alias="gke-ray-tpu:capacity",
        description="how GKE obtains the TPU VMs: `on-demand` (the tutorial's), `spot` (cheaper, preemptible), "
        "`flex-start` (Dynamic Workload Scheduler: Standard only, v5e/v5p/v6e, GKE >= 1.33.0-gke.1712000, nodes "
        "live at most 7 days) or `reservation` (consumes `reservation`)",
        json_schema_extra=feeds("TpuSliceNodePoolArgs.capacity", "RayTpuClusterArgs.capacity"),
    )
    reservation: Annotated[Optional[str], _rule(capacity_rules.check_reservation)] = Field(
        None,
        alias="gke-ray-tpu:reservation",
        description="the reservation `capacity: reservation` consumes (a name, or `projects/<p>/reservations/<name>`); required exactly then",
        json_schema_extra=feeds("TpuSliceNodePoolArgs.reservation"),
    )
    scale_to_zero: Optional[Flag] = Field(
        None,
        alias="gke-ray-tpu:scaleToZero",
        description="slices exist only while a run does: each run is a RayJob that brings its own RayCluster and "
        "deletes it when it ends, each pool autoscales 0 to its hosts, and a run waits minutes for its slices. Unset: true for "
        "`flex-start` (required), false otherwise (a held slice starts runs at once; on demand, one released may not come back)",
        json_schema_extra=feeds("GkeRayClusterArgs.scale_to_zero", "TpuSliceNodePoolArgs.scale_to_zero", "RayTpuClusterArgs.scale_to_zero"),
    )
    max_run_duration: Annotated[Optional[int], bounded(capacity_rules.MAX_RUN_DURATION)] = Field(
        None,
        alias="gke-ray-tpu:maxRunDuration",
        description=f"`flex-start` only: seconds after which GKE stops a TPU node, {capacity_rules.MAX_RUN_DURATION.low}-"
        f"{capacity_rules.MAX_RUN_DURATION.high} (unset: GKE's 7 days)",
        json_schema_extra=feeds("TpuSliceNodePoolArgs.max_run_duration_s", "TpuQueueArgs.max_run_duration_s"),
    )
    install_kueue: Flag = Field(
        tpu_queue.DEFAULT_INSTALL_KUEUE,
        alias="gke-ray-tpu:installKueue",
        description=f"with `scaleToZero`: install Kueue {kueue.KUEUE_VERSION} for the runs' queue (docs/queues.md); `false`: use "
        "the cluster's own Kueue (>= 0.16, checked at preview), installing nothing",
        json_schema_extra=feeds("TpuQueueArgs.install_kueue"),
    )
    pods_ready_timeout: Annotated[Optional[int], bounded(tpu_queue.PODS_READY_TIMEOUT)] = Field(
        None,
        alias="gke-ray-tpu:podsReadyTimeout",
        description=f"with `scaleToZero`: seconds from a run's admission by which its slices must all be up, else Kueue "
        f"evicts it, releasing the slices that came, and requeues it; at least {tpu_queue.PODS_READY_TIMEOUT.low} "
        f"(unset: Kueue's {WaitSettings().timeout_s}); a Kueue the stack installs",
        json_schema_extra=feeds("TpuQueueArgs.pods_ready_timeout_s"),
    )
    requeue_limit: Annotated[Optional[int], bounded(tpu_queue.REQUEUE_LIMIT)] = Field(
        None,
        alias="gke-ray-tpu:requeueLimit",
        description=f"with `scaleToZero`: requeues after which Kueue gives up a run whose slices never all came "
        f"(unset: {WaitSettings().requeue_limit}); a Kueue the stack installs",
        json_schema_extra=feeds("TpuQueueArgs.requeue_limit"),
    )
    queueing_strategy: Literal[kueue.QUEUEING_STRATEGIES] = Field(
        kueue.STRICT_FIFO,
        alias="gke-ray-tpu:queueingStrategy",
        description="with `scaleToZero`: `StrictFIFO` (a run that does not fit holds back the runs behind it) or "
        "`BestEffortFIFO` (smaller runs behind it may start)",
        json_schema_extra=feeds("TpuQueueArgs.queueing_strategy"),
    )
    cohort: Annotated[Optional[str], _name(naming.DNS_LABEL)] = Field(
        None,
        alias="gke-ray-tpu:cohort",
        description="with `scaleToZero`: a Kueue cohort whose queues (other stacks', other teams') lend each other "
        "unused chips",
        json_schema_extra=feeds("TpuQueueArgs.cohort"),
    )
    borrowing_limit: Annotated[Optional[int], bounded(tpu_queue.CHIP_LIMIT)] = Field(
        None,
        alias="gke-ray-tpu:borrowingLimit",
        description="with `cohort`: chips the stack's queue may borrow beyond its own (unset: as many as the cohort "
        "leaves unused)",
        json_schema_extra=feeds("TpuQueueArgs.borrowing_limit"),
    )
    lending_limit: Annotated[Optional[int], bounded(tpu_queue.CHIP_LIMIT)] = Field(
        None,
        alias="gke-ray-tpu:lendingLimit",
        description="with `cohort`: chips of its own the cohort may borrow (unset: all while unused)",
        json_schema_extra=feeds("TpuQueueArgs.lending_limit"),
    )
    queued_provisioning: Flag = Field(
        tpu_queue.DEFAULT_QUEUED_PROVISIONING,
        alias="gke-ray-tpu:queuedProvisioning",
        description="`flex-start` with one slice: GKE's queued provisioning brings the slice whole before Kueue "
        "admits the run, so waiting bills nothing (the pool is then reachable through Kueue only)",
        json_schema_extra=feeds("TpuSliceNodePoolArgs.queued_provisioning", "TpuQueueArgs.queued_provisioning"),
    )
    bucket_name: Annotated[str, _rule(naming.check_bucket_name)] = Field(
        alias="gke-ray-tpu:bucketName",
        description="Google's bucket naming rules (3-63 characters, no `goog` prefix, no `google`, no dots)",
        json_schema_extra=feeds("GcsWorkloadIdentityArgs.bucket_name"),
    )
    bucket_deletion: Literal[gcs_workload_identity.BUCKET_DELETION_POLICIES] = Field(
        gcs_workload_identity.DEFAULT_BUCKET_DELETION,
        alias="gke-ray-tpu:bucketDeletion",
        description="`retain`: destroy forgets the bucket and keeps it; `delete-empty`: GCS refuses while checkpoints remain, so destroy stops; `force`: deletes it with every object",
        json_schema_extra=feeds("GcsWorkloadIdentityArgs.bucket_deletion"),
    )
    bucket_hierarchical_namespace: Flag = Field(
        gcs_workload_identity.DEFAULT_HIERARCHICAL_NAMESPACE,
        alias="gke-ray-tpu:bucketHierarchicalNamespace",
        description="create the bucket with a hierarchical namespace (atomic folder renames through GCS FUSE; Orbax then lists and deletes checkpoint steps through folders, not tested here); only when the bucket is created: an existing bucket keeps its namespace (a preview warning says so) and is never replaced",
        json_schema_extra=feeds("GcsWorkloadIdentityArgs.hierarchical_namespace"),
    )
    namespace: Annotated[str, _name(naming.DNS_LABEL), _rule(_created_namespace)] = Field(
        gcs_workload_identity.DEFAULT_NAMESPACE,
        alias="gke-ray-tpu:namespace",
        description="a DNS-1123 label; a namespace other than `default` is created",
        json_schema_extra=feeds("GcsWorkloadIdentityArgs.namespace"),
    )
    ksa_name: Annotated[str, _rule(gcs_workload_identity.check_ksa_name)] = Field(
        gcs_workload_identity.DEFAULT_KSA_NAME,
        alias="gke-ray-tpu:ksaName",
        description="the Kubernetes service account of the Ray pods; `ns/<namespace>/sa/<ksaName>` is its Workload Identity subject, at most 127 characters",
        json_schema_extra=feeds("GcsWorkloadIdentityArgs.ksa_name"),
    )
    ray_cluster_name: Annotated[str, _name(naming.RAY_CLUSTER_NAME)] = Field(
        ray_tpu_cluster.DEFAULT_NAME,
        alias="gke-ray-tpu:rayClusterName",
        description="the head service is `<name>-head-svc`; at most 53 characters (KubeRay), 41 for multi-host slices (the TPU webhook's `<name>-headless`)",
        json_schema_extra=feeds("RayTpuClusterArgs.ray_cluster_name", "RayTpuClusterArgs.compute_class"),
    )
    ray_image: Annotated[str, _rule(ray_tpu_cluster.check_image)] = Field(
        ray_tpu_cluster.DEFAULT_IMAGE,
        alias="gke-ray-tpu:rayImage",
        description="Ray's release image of the driver's Ray (docs/security.md: why not the tutorial's TPU nightly): the base of the workers' image, or with `buildImage` false the Ray pods' image, pulled once per node; a moving tag (`nightly`, `latest`) is pulled on every start and gets a preview warning",
        json_schema_extra=feeds("RayTpuClusterArgs.image", "WorkerImageArgs.base_image"),
    )
    build_image: Flag = Field(
        worker_image.BUILT_BY_DEFAULT,
        alias="gke-ray-tpu:buildImage",
        description="`pulumi up` builds the TPU workers' image (`rayImage` with the workers' lock installed; needs a "
        "Docker daemon where it runs), pushes it to Artifact Registry and runs every Ray pod on it by digest, so the "
        "TPU hosts install nothing at start; false: the pods run `rayImage` and the TPU workers install what it lacks "
        "of the lock at every start (docs/image.md)",
    )
    existing_image_repository: Annotated[Optional[str], _rule(worker_image.check_repository)] = Field(
        None,
        alias="gke-ray-tpu:existingImageRepository",
        description="an Artifact Registry Docker repository in `gcp:region` to push the image to (unset: the stack "
        "creates `<clusterName>-images` and lets the nodes' service account read it)",
        json_schema_extra=feeds("WorkerImageArgs.repository", "WorkerImageArgs.existing_repository"),
    )
    image_streaming: Flag = Field(
        gke_cluster.DEFAULT_IMAGE_STREAMING,
        alias="gke-ray-tpu:imageStreaming",
        description="GKE image streaming on the stack's node pools (Standard; Autopilot streams anyway): an image in "
        "Artifact Registry starts before it is pulled whole; needs the Container File System API enabled",
        json_schema_extra=feeds("GkeRayClusterArgs.image_streaming", "TpuSliceNodePoolArgs.image_streaming"),
    )
    megascale_port: Annotated[int, bounded(ray_tpu_cluster.MEGASCALE_PORT), _rule(ray_tpu_cluster.check_megascale_port)] = Field(
        ray_tpu_cluster.DEFAULT_MEGASCALE_PORT, alias="gke-ray-tpu:megascalePort", description="`MEGASCALE_PORT` of the TPU workers",
        json_schema_extra=feeds("RayTpuClusterArgs.megascale_port"),
    )
    project_number: Annotated[Optional[str], _rule(_project_number)] = Field(
        None, alias="gke-ray-tpu:projectNumber", description="skips the `getProject` call used for the `principal://` member",
        json_schema_extra=feeds("GcsWorkloadIdentityArgs.project_number", "WorkerImageArgs.readers"),
    )
    planned_preset: Annotated[Optional[str], _rule(_planned_preset)] = Field(
        None,
        alias="gke-ray-tpu:plannedPreset",
        description="the training preset preview checks against the slices; a mismatch fails preview when set "
        f"(unset: `{DEFAULT_PRESET}`, and a mismatch only warns)",
    )
    planned_overrides: Annotated[Json[dict], Field(examples=['{"per_device_batch_size": 2}']), _rule(_planned_overrides)] = Field(
        default_factory=dict,
        alias="gke-ray-tpu:plannedOverrides",
        description="a JSON object of MaxText keys applied to the planned preset; the keys the estimates read are type- and range-checked",
    )

    runs: Annotated[Json[list[DeclaredRun]], Field(examples=[json.dumps([RUN_EXAMPLE])]), AfterValidator(_distinct_names)] = Field(
        default=(),
        json_schema_extra=feeds(*(f"MaxTextRunArgs.{argument}" for argument in MaxTextRunArgs.__annotations__)),
        alias="gke-ray-tpu:runs",
        description="training runs `pulumi up` applies as KubeRay RayJobs, on the stack's RayCluster or, with `scaleToZero`, "
        "each with its own: a JSON list of `{name, preset, overrides, elastic, minSlices, activeDeadlineSeconds, backoffLimit}` "
        "(`backoffLimit`: retries, each on a new cluster, so above 0 only with `scaleToZero`); checked like the submit "
        "command's, and a run that does not fit fails preview",
    )
    compile_check: Flag = Field(
        False,
        alias="gke-ray-tpu:compileCheck",
        description="preview compiles each declared run's train step for the slices, at each slice count it may train "
        "on, and whether libtpu takes the TPU pods' XLA flags, with XLA's TPU compiler on the machine running it (libtpu, no TPU; "
        "minutes per run, then cached until the run changes) and a run XLA does not fit at some count fails preview; "
        "false: the HBM estimate decides, and says `uncertain` near the limit",
    )
