"""The stack's config: every key declared once, with its type, default, rule and description.

:class:`StackConfig` is the whole contract of ``Pulumi.<stack>.yaml``: each
field carries its config key (the alias), its default, its description (the
README's config table is rendered from them, and a test keeps the two equal)
and its rule. Defaults of the keys a component takes come from that
component's module, so the stack and the library cannot drift apart.

:func:`parse_stack_config` validates the raw strings Pulumi hands a program,
before anything is registered. Every failure is one
:class:`~core.errors.ConfigError` naming the key the user sets
(``gke-ray-tpu:releaseChannel``), the bad value and what would be valid;
names the stack derives from a value (``<clusterName>-net-1``, the RayCluster's
Services) are checked against the platform's rules under the key they come from.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterator, Mapping, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from components import dcn_networks, gcs_workload_identity, gke_cluster, ray_tpu_cluster, tpu_slice_node_pool
from components.maxtext_run import MaxTextRunArgs, build_run_job
from core import capacity as capacity_rules, gke, naming
from core.errors import ConfigError
from core.job_spec import JobSpec
from core.maxtext import check_settings
from core.presets import get_preset
from core.tpu_catalogue import SliceShape, slice_shape

NAMESPACE = "gke-ray-tpu"
GCP_KEYS = ("gcp:project", "gcp:region", "gcp:zone")
RETIRED_KEYS = {
    f"{NAMESPACE}:spot": f"{NAMESPACE}:capacity instead, which replaced it: `pulumi config rm {NAMESPACE}:spot`, then "
    f"`pulumi config set {NAMESPACE}:capacity spot` for Spot slices (on-demand is the default)",
}
"""Keys older stacks set, and what to write instead."""

_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/-]*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?")
_MACHINE_TYPE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)+")


def config_key(field: str) -> str:
    return StackConfig.model_fields[field].alias  # type: ignore[return-value]


# -- value types: config arrives as strings (JSON for lists and objects) ------------------------


def _text(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str):
        raise ConfigError(config_key(info.field_name), value, "a string")
    return value


def _bool(value: Any, info: ValidationInfo) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(config_key(info.field_name), value, "true or false")


def _json(kind: type, example: str) -> Callable[[Any, ValidationInfo], Any]:
    def parse(value: Any, info: ValidationInfo) -> Any:
        parsed = value
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                parsed = None
        if not isinstance(parsed, kind):
            raise ConfigError(config_key(info.field_name), value, f"a JSON {kind.__name__} such as {example}")
        return parsed

    return parse


def _integer(low: int, high: int) -> Callable[[Any, ValidationInfo], int]:
    def parse(value: Any, info: ValidationInfo) -> int:
        expected = f"an integer between {low} and {high}"
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(config_key(info.field_name), value, expected) from None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(config_key(info.field_name), value, expected)
        return value

    return parse


def _choice(*choices: str) -> Callable[[Any, ValidationInfo], str]:
    def parse(value: Any, info: ValidationInfo) -> str:
        if value not in choices:
            raise ConfigError(config_key(info.field_name), value, f"one of {', '.join(choices)}")
        return value

    return parse


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


Text = Annotated[str, BeforeValidator(_text)]
Flag = Annotated[bool, BeforeValidator(_bool)]


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


@dataclass(frozen=True)
class DeclaredRun:
    """One training run declared in the stack (``gke-ray-tpu:runs``): ``pulumi up`` applies it as a RayJob."""

    name: str
    """The RayJob's name and MaxText's run_name: checkpoints go to gs://<bucket>/<name>/checkpoints."""
    preset: str
    overrides: dict
    elastic: bool = False
    min_slices: Optional[int] = None
    active_deadline_seconds: Optional[int] = None


_RUN_FIELDS = ("name", "preset", "overrides", "elastic", "minSlices", "activeDeadlineSeconds", "backoffLimit")


def _runs(value: Any, info: ValidationInfo) -> tuple[DeclaredRun, ...]:
    """``[{"name": ..., "preset": ..., "overrides": {...}, ...}, ...]``, every field checked under its key."""
    key = config_key(info.field_name)
    runs = _json(list, '[{"name": "baseline", "preset": "llama3-8b"}]')(value, info)
    parsed, names = [], set()
    for index, item in enumerate(runs):
        at = f"{key}[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(at, item, 'an object such as {"name": "baseline", "preset": "llama3-8b"}')
        unknown = sorted(set(item) - set(_RUN_FIELDS))
        if unknown:
            raise ConfigError(f"{at}.{unknown[0]}", item[unknown[0]], f"a known field: {', '.join(_RUN_FIELDS)}")
        name = naming.RAY_JOB_NAME.check(item.get("name"), f"{at}.name")
        if name in names:
            raise ConfigError(f"{at}.name", name, "a name no other run of the stack has")
        names.add(name)
        preset = get_preset(item.get("preset", "llama3-8b"), key=f"{at}.preset")
        if preset.backend != "tpu":
            raise ConfigError(f"{at}.preset", preset.name, "a TPU preset (tiny-cpu is for the local run)")
        overrides = item.get("overrides", {})
        if not isinstance(overrides, dict):
            raise ConfigError(f"{at}.overrides", overrides, 'an object of MaxText keys, e.g. {"steps": 20}')
        _planned_overrides(overrides, f"{at}.overrides")
        if "run_name" in overrides:
            raise ConfigError(f"{at}.overrides.run_name", overrides["run_name"], f"unset: the run's name is {at}.name")
        elastic = item.get("elastic", False)
        if not isinstance(elastic, bool):
            raise ConfigError(f"{at}.elastic", elastic, "true or false")
        for field, low in (("minSlices", 1), ("activeDeadlineSeconds", 1)):
            number = item.get(field)
            if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < low):
                raise ConfigError(f"{at}.{field}", number, f"an integer >= {low}")
        if item.get("backoffLimit", 0) != 0:
            raise ConfigError(
                f"{at}.backoffLimit", item["backoffLimit"],
                "0: KubeRay refuses RayJob retries on an existing RayCluster (older releases deleted that cluster "
                "to retry); a run restarts inside its job instead (Ray Train's max_failures, 3 when elastic or on Spot)",
            )
        parsed.append(
            DeclaredRun(
                name=name,
                preset=preset.name,
                overrides=overrides,
                elastic=elastic or preset.elastic or item.get("minSlices") is not None,
                min_slices=item.get("minSlices"),
                active_deadline_seconds=item.get("activeDeadlineSeconds"),
            )
        )
    return tuple(parsed)


def _project_number(value: str, key: str) -> None:
    if not value.isdigit():
        raise ConfigError(key, value, "digits only, e.g. 123456789012")


class StackConfig(BaseModel):
    """The validated stack: everything ``__main__.py`` needs, already checked."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    project: Annotated[Text, _name(naming.PROJECT_ID)] = Field(
        alias="gcp:project", description="the project everything is created in"
    )
    region: Annotated[Text, _name(naming.REGION)] = Field(
        alias="gcp:region", description="the region of the subnets, the bucket and an Autopilot cluster"
    )
    zone: Annotated[Optional[Text], _name(naming.ZONE)] = Field(
        None, alias="gcp:zone", description="the zone of the slices and of a Standard cluster; unset: `<region>-b`"
    )
    cluster_name: Annotated[Text, _name(naming.GKE_NAME)] = Field(
        "ray-tpu-multislice",
        alias="gke-ray-tpu:clusterName",
        description="GKE cluster name (1-40 characters); also prefixes the DCN networks (`<name>-net-<i>`), subnets and firewall rules",
    )
    cluster_mode: Annotated[str, BeforeValidator(_choice(*gke.CLUSTER_MODES))] = Field(
        gke_cluster.DEFAULT_MODE,
        alias="gke-ray-tpu:clusterMode",
        description="`standard`, or `autopilot`: a regional cluster, TPU nodes from a DRANET ComputeClass, no node pools or networks of ours",
    )
    cluster_version: Annotated[Text, _rule(_version)] = Field(
        gke_cluster.DEFAULT_VERSION,
        alias="gke-ray-tpu:clusterVersion",
        description="a minor (`1.35`: the channel's newest patch of it) or an exact version (`1.35.2-gke.1842000`); at least the DRANET minimum, 1.34.1-gke.1829001 (Standard) or 1.35.2-gke.1842000 (Autopilot); preview checks GKE still offers it",
    )
    release_channel: Annotated[str, BeforeValidator(_choice(*gke.RELEASE_CHANNELS))] = Field(
        gke_cluster.DEFAULT_RELEASE_CHANNEL,
        alias="gke-ray-tpu:releaseChannel",
        description="`UNSPECIFIED` is allowed for Standard only",
    )
    deletion_protection: Flag = Field(
        True,
        alias="gke-ray-tpu:deletionProtection",
        description="the dev stack sets `false`; `pulumi destroy` of a protected cluster fails until you set it false and `pulumi up`",
    )
    existing_cluster_name: Annotated[Optional[Text], _name(naming.GKE_NAME)] = Field(
        None,
        alias="gke-ray-tpu:existingClusterName",
        description="reuse this cluster: nothing of the cluster is created; preview checks it has Dataplane V2, the Workload Identity pool, the Ray operator and GCS FUSE add-ons and the DRANET version",
    )
    existing_cluster_location: Annotated[Optional[Text], _rule(_location)] = Field(
        None, alias="gke-ray-tpu:existingClusterLocation", description="the zone or region of `existingClusterName`; unset: `gcp:zone`"
    )
    cpu_machine_type: Annotated[Text, _pattern(_MACHINE_TYPE, "a Compute Engine machine type such as n1-standard-16")] = Field(
        gke_cluster.DEFAULT_CPU_MACHINE_TYPE,
        alias="gke-ray-tpu:cpuMachineType",
        description="the CPU pool for the Ray head and system pods (Standard)",
    )
    cpu_node_count: Annotated[int, BeforeValidator(_integer(1, 1000))] = Field(
        gke_cluster.DEFAULT_CPU_NODE_COUNT, alias="gke-ray-tpu:cpuNodeCount", description="nodes of that pool, 1-1000"
    )
    enable_multi_networking: Flag = Field(
        False, alias="gke-ray-tpu:enableMultiNetworking", description="as in the tutorial; DRANET does not need it"
    )
    dcn_cidrs: Annotated[Optional[list], BeforeValidator(_json(list, '["10.50.0.0/16", "10.60.0.0/16"]'))] = Field(
        None,
        alias="gke-ray-tpu:dcnCidrs",
        description='one DCN network each; private, /8-/29, disjoint, at most the NICs DRANET can hand out (2 on `ct6e-standard-4t`, 0 on v4/v5e/v5p); unset: `["10.50.0.0/16","10.60.0.0/16"]` cut to that many',
    )
    tpu_generation: Text = Field(
        tpu_slice_node_pool.DEFAULT_GENERATION,
        alias="gke-ray-tpu:tpuGeneration",
        description="any generation of `core/tpu_catalogue.py`: v4, v5e, v5p, v6e, tpu7x",
    )
    tpu_topology: Text = Field(
        tpu_slice_node_pool.DEFAULT_TOPOLOGY,
        alias="gke-ray-tpu:tpuTopology",
        description="a topology of that generation; machine type, host count and chips per host are derived",
    )
    num_slices: Annotated[int, BeforeValidator(_integer(1, 64))] = Field(
        ray_tpu_cluster.DEFAULT_NUM_SLICES,
        alias="gke-ray-tpu:numSlices",
        description="one node pool and one RayCluster replica per slice, 1-64; more than 1 needs a multi-host topology",
    )
    elastic_min_slices: Annotated[Optional[int], BeforeValidator(_integer(1, 64))] = Field(
        None,
        alias="gke-ray-tpu:elasticMinSlices",
        description="lower bound of elastic training (the RayCluster's `minReplicas`), 1 to `numSlices`; unset: `numSlices`",
    )
    capacity: Annotated[str, BeforeValidator(_choice(*capacity_rules.CAPACITY_MODES))] = Field(
        capacity_rules.DEFAULT_CAPACITY,
        alias="gke-ray-tpu:capacity",
        description="how GKE obtains the TPU VMs: `on-demand` (the tutorial's), `spot` (cheaper, preemptible), "
        "`flex-start` (Dynamic Workload Scheduler: Standard only, v5e/v5p/v6e, GKE >= 1.33.0-gke.1712000, nodes "
        "live at most 7 days) or `reservation` (consumes `reservation`)",
    )
    reservation: Annotated[Optional[Text], _rule(capacity_rules.check_reservation)] = Field(
        None,
        alias="gke-ray-tpu:reservation",
        description="the reservation `capacity: reservation` consumes (a name, or `projects/<p>/reservations/<name>`); required exactly then",
    )
    scale_to_zero: Optional[Flag] = Field(
        None,
        alias="gke-ray-tpu:scaleToZero",
        description="slices exist only while a job asks for them: each pool autoscales 0 to its hosts and KubeRay's "
        "autoscaler adds and removes whole slices; a run then waits minutes for its slices. Unset: true for "
        "`flex-start` (required), false otherwise (a held slice starts runs at once; on demand, one released may not come back)",
    )
    idle_timeout_seconds: Annotated[int, BeforeValidator(_integer(60, 86400))] = Field(
        ray_tpu_cluster.DEFAULT_IDLE_TIMEOUT_S,
        alias="gke-ray-tpu:idleTimeoutSeconds",
        description="with `scaleToZero`: idle seconds before KubeRay's autoscaler removes a slice, 60-86400",
    )
    max_run_duration: Annotated[Optional[int], BeforeValidator(_integer(1, capacity_rules.MAX_RUN_DURATION_S))] = Field(
        None,
        alias="gke-ray-tpu:maxRunDuration",
        description="`flex-start` only: seconds after which GKE stops a TPU node, 1-604800 (unset: GKE's 7 days)",
    )
    bucket_name: Annotated[Text, _rule(naming.check_bucket_name)] = Field(
        alias="gke-ray-tpu:bucketName",
        description="Google's bucket naming rules (3-63 characters, no `goog` prefix, no `google`, no dots)",
    )
    bucket_deletion: Annotated[str, BeforeValidator(_choice(*gcs_workload_identity.BUCKET_DELETION_POLICIES))] = Field(
        gcs_workload_identity.DEFAULT_BUCKET_DELETION,
        alias="gke-ray-tpu:bucketDeletion",
        description="`retain`: destroy forgets the bucket and keeps it; `delete-empty`: GCS refuses while checkpoints remain, so destroy stops; `force`: deletes it with every object",
    )
    namespace: Annotated[Text, _name(naming.DNS_LABEL)] = Field(
        gcs_workload_identity.DEFAULT_NAMESPACE,
        alias="gke-ray-tpu:namespace",
        description="a DNS-1123 label; a namespace other than `default` is created",
    )
    ksa_name: Annotated[Text, _name(naming.DNS_SUBDOMAIN)] = Field(
        gcs_workload_identity.DEFAULT_KSA_NAME,
        alias="gke-ray-tpu:ksaName",
        description="the Kubernetes service account of the Ray pods; `ns/<namespace>/sa/<ksaName>` is its Workload Identity subject, at most 127 characters"
    )
    ray_cluster_name: Annotated[Text, _name(naming.RAY_CLUSTER_NAME)] = Field(
        ray_tpu_cluster.DEFAULT_NAME,
        alias="gke-ray-tpu:rayClusterName",
        description="the head service is `<name>-head-svc`; at most 53 characters (KubeRay), 41 for multi-host slices (the TPU webhook's `<name>-headless`)",
    )
    ray_image: Annotated[Text, _pattern(_IMAGE, "an image reference such as rayproject/ray:nightly-py312-tpu")] = Field(
        ray_tpu_cluster.DEFAULT_IMAGE,
        alias="gke-ray-tpu:rayImage",
        description="the tutorial's image; a moving tag, so it is pulled on every start. Pin your own tested image for production",
    )
    megascale_port: Annotated[int, BeforeValidator(_integer(1024, 65535))] = Field(
        ray_tpu_cluster.DEFAULT_MEGASCALE_PORT, alias="gke-ray-tpu:megascalePort", description="`MEGASCALE_PORT` of the TPU workers"
    )
    project_number: Annotated[Optional[Text], _rule(_project_number)] = Field(
        None, alias="gke-ray-tpu:projectNumber", description="skips the `getProject` call used for the `principal://` member"
    )
    planned_preset: Annotated[Optional[Text], _rule(_planned_preset)] = Field(
        None,
        alias="gke-ray-tpu:plannedPreset",
        description="the training preset preview checks against the slices; a mismatch fails preview when set (unset: `llama3-8b`, and a mismatch only warns)",
    )
    planned_overrides: Annotated[dict, BeforeValidator(_json(dict, '{"per_device_batch_size": 2}')), _rule(_planned_overrides)] = Field(
        default_factory=dict,
        alias="gke-ray-tpu:plannedOverrides",
        description="a JSON object of MaxText keys applied to the planned preset; the keys the estimates read are type- and range-checked",
    )

    runs: Annotated[tuple, BeforeValidator(_runs)] = Field(
        default=(),
        alias="gke-ray-tpu:runs",
        description="training runs `pulumi up` applies as KubeRay RayJobs on the stack's RayCluster: a JSON list of "
        "`{name, preset, overrides, elastic, minSlices, activeDeadlineSeconds, backoffLimit}`; checked like the submit command's, and a run that does not fit fails preview",
    )
    compile_check: Flag = Field(
        False,
        alias="gke-ray-tpu:compileCheck",
        description="preview compiles each declared run's train step for the slices with XLA's TPU compiler on the "
        "machine running it (libtpu, no TPU; minutes per run, then cached until the run changes) and a run XLA does not "
        "fit fails preview; false: the HBM estimate decides, and says `uncertain` near the limit",
    )

    @model_validator(mode="after")
    def _across_keys(self) -> "StackConfig":
        shape = self.shape
        if self.num_slices > 1 and not shape.multi_host:
            raise ConfigError(
                config_key("tpu_topology"),
                shape.topology,
                f"a multi-host topology: GKE Multislice ({self.num_slices} slices) needs multi-host slices",
            )
        if self.elastic_min_slices is not None and self.elastic_min_slices > self.num_slices:
            raise ConfigError(
                config_key("elastic_min_slices"), self.elastic_min_slices, f"an integer between 1 and {self.num_slices}"
            )
        if self.zone is not None and not self.zone.startswith(self.region + "-"):
            raise ConfigError("gcp:zone", self.zone, f"a zone of gcp:region {self.region} (like {self.region}-b)")
        capacity_rules.check_capacity(
            self.capacity, self.reservation, self.scale_to_zero_or_default, self.max_run_duration, shape.generation,
            key=lambda name: config_key({"max_run_duration_s": "max_run_duration"}.get(name, name)),
        )
        if self.autopilot:
            capacity_rules.check_autopilot_capacity(self.capacity, config_key("capacity"))
        if self.capacity == "flex-start" and not self.existing_cluster_name:
            gke.check_flex_start_floor(
                gke.parse_version(self.cluster_version, config_key("cluster_version")), config_key("cluster_version")
            )
        gke_cluster.check_release_channel(self.cluster_mode, self.release_channel, config_key("release_channel"))
        cidrs = self.dcn_cidrs_or_default
        tpu_slice_node_pool.check_network_count(shape, len(cidrs), list(cidrs), config_key("dcn_cidrs"))
        if cidrs and not self.existing_cluster_name:
            gke.check_dranet_floor(
                self.cluster_mode, gke.parse_version(self.cluster_version, config_key("cluster_version")), config_key("cluster_version")
            )
        if not self.autopilot:
            dcn_networks.check_name_prefix(self.cluster_name, len(cidrs), key=config_key("cluster_name"))
        gcs_workload_identity.check_subject(self.namespace, self.ksa_name, config_key("ksa_name"))
        name_rule = naming.RAY_TPU_CLUSTER_NAME if shape.multi_host else naming.RAY_CLUSTER_NAME
        name_rule.check(self.ray_cluster_name, config_key("ray_cluster_name"))
        for index, _ in enumerate(self.runs):
            self.declared_job(index)
        return self

    @property
    def shape(self) -> SliceShape:
        return slice_shape(
            self.tpu_generation, self.tpu_topology, key=config_key("tpu_topology"), generation_key=config_key("tpu_generation")
        )

    @property
    def autopilot(self) -> bool:
        return self.cluster_mode == "autopilot"

    @property
    def zone_or_default(self) -> str:
        return self.zone or f"{self.region}-b"

    @property
    def cluster_location(self) -> str:
        """Autopilot clusters are regional; the tutorial's Standard cluster is zonal."""
        if self.existing_cluster_name:
            return self.existing_cluster_location or self.zone_or_default
        return self.region if self.autopilot else self.zone_or_default

    @property
    def dcn_cidrs_or_default(self) -> tuple[str, ...]:
        if self.dcn_cidrs is None:
            return dcn_networks.DEFAULT_CIDRS[: self.shape.generation.dcn_nics_per_host]
        return dcn_networks.check_cidrs(self.dcn_cidrs, key=config_key("dcn_cidrs"))

    @property
    def scale_to_zero_or_default(self) -> bool:
        return self.scale_to_zero if self.scale_to_zero is not None else capacity_rules.default_scale_to_zero(self.capacity)

    @property
    def elastic_min(self) -> int:
        return self.elastic_min_slices if self.elastic_min_slices is not None else self.num_slices

    def run_args(self, index: int) -> MaxTextRunArgs:
        """The MaxTextRun of declared run ``index`` on this stack's RayCluster and slices."""
        run = self.runs[index]
        args = MaxTextRunArgs(
            run_name=run.name,
            ray_cluster_name=self.ray_cluster_name,
            bucket_name=self.bucket_name,
            num_slices=self.num_slices,
            generation=self.tpu_generation,
            topology=self.tpu_topology,
            preset=run.preset,
            overrides=run.overrides,
            elastic=run.elastic,
            min_slices=run.min_slices if run.min_slices is not None else self.elastic_min,
            capacity=self.capacity,
            scale_to_zero=self.scale_to_zero_or_default,
            namespace=self.namespace,
        )
        if run.active_deadline_seconds is not None:
            args["active_deadline_seconds"] = run.active_deadline_seconds
        return args

    def declared_job(self, index: int) -> JobSpec:
        """The job of run ``index``, as the submit command would build it for this stack (same rules)."""
        run = self.runs[index]
        at = f"{config_key('runs')}[{index}]"
        args = self.run_args(index)
        if run.elastic and not self.elastic_min <= args["min_slices"] <= self.num_slices:
            raise ConfigError(
                f"{at}.minSlices", args["min_slices"],
                f"an integer between elasticMinSlices ({self.elastic_min}) and numSlices ({self.num_slices}): "
                "the RayCluster keeps no fewer slices",
            )
        try:
            return build_run_job(args)
        except ConfigError as error:
            # A MaxText key of the run's own overrides, else one its preset sets.
            mine = [part for part in re.split(r"[*,]", error.key) if part in run.overrides]
            where = f"{at}.overrides.{error.key}" if mine else f"{at} ({error.key} of preset {run.preset})"
            raise error.renamed(where) from None

    @property
    def compute_class_name(self) -> Optional[str]:
        return f"{self.ray_cluster_name}-tpu" if self.autopilot else None


def parse_stack_config(raw: Mapping[str, str]) -> StackConfig:
    """Validate the raw config of one stack (``{full key: string}``). Raises ConfigError on the first bad key."""
    ours = {key: value for key, value in raw.items() if key.startswith(NAMESPACE + ":") or key in GCP_KEYS}
    for key, instead in RETIRED_KEYS.items():
        if key in ours:
            raise ConfigError(key, ours[key], instead)
    known = {field.alias for field in StackConfig.model_fields.values()}
    unknown = sorted(key for key in ours if key not in known)
    if unknown:
        names = ", ".join(sorted(alias.split(":", 1)[1] for alias in known if alias.startswith(NAMESPACE)))
        raise ConfigError(unknown[0], ours[unknown[0]], f"a known key: {names}")
    for key in ("gcp:project", "gcp:region", f"{NAMESPACE}:bucketName"):
        if not ours.get(key):
            raise ConfigError(key, ours.get(key), "a value (set it with `pulumi config set`)")
    try:
        return StackConfig.model_validate({key: value for key, value in ours.items() if value != ""})
    except ValidationError as error:
        raise _config_error(error) from None


def _config_error(error: ValidationError) -> ConfigError:
    first = error.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    key = first["loc"][0] if first["loc"] else NAMESPACE
    return ConfigError(str(key), first.get("input"), first["msg"])


def raw_pulumi_config() -> dict[str, str]:
    """Every config key of the running Pulumi program, as the engine passed it in."""
    from pulumi.runtime import config as runtime_config

    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


def config_table() -> str:
    """The README's config table, from the model: key, default, notes."""
    rows = ["| key | default | notes |", "|---|---|---|"]
    for field in StackConfig.model_fields.values():
        alias = field.alias or ""
        key = alias.split(":", 1)[1] if alias.startswith(NAMESPACE + ":") else alias
        if field.is_required():
            default = "required"
        elif field.default_factory is not None:
            default = f"`{json.dumps(field.default_factory())}`"
        elif field.default is None:
            default = "unset"
        elif isinstance(field.default, (bool, tuple)):
            default = f"`{json.dumps(field.default)}`"
        else:
            default = f"`{field.default}`"
        rows.append(f"| `{key}` | {default} | {field.description} |")
    return "\n".join(rows)


def component_keys(cfg: StackConfig) -> dict[str, str]:
    """The config key behind each component argument the stack sets, for errors raised inside components."""
    key = config_key
    return {
        "GkeRayClusterArgs.cluster_name": key("existing_cluster_name" if cfg.existing_cluster_name else "cluster_name"),
        "GkeRayClusterArgs.location": key("existing_cluster_location" if cfg.existing_cluster_name else "region"),
        "GkeRayClusterArgs.mode": key("cluster_mode"),
        "GkeRayClusterArgs.version": key("cluster_version"),
        "GkeRayClusterArgs.release_channel": key("release_channel"),
        "GkeRayClusterArgs.cpu_node_count": key("cpu_node_count"),
        "DcnNetworksArgs.name_prefix": key("cluster_name"),
        "DcnNetworksArgs.cidrs": key("dcn_cidrs"),
        "TpuSliceNodePoolArgs.generation": key("tpu_generation"),
        "TpuSliceNodePoolArgs.topology": key("tpu_topology"),
        "TpuSliceNodePoolArgs.capacity": key("capacity"),
        "TpuSliceNodePoolArgs.reservation": key("reservation"),
        "TpuSliceNodePoolArgs.scale_to_zero": key("scale_to_zero"),
        "TpuSliceNodePoolArgs.max_run_duration_s": key("max_run_duration"),
        "TpuSliceNodePoolArgs.additional_networks": key("dcn_cidrs"),
        "GcsWorkloadIdentityArgs.bucket_name": key("bucket_name"),
        "GcsWorkloadIdentityArgs.namespace": key("namespace"),
        "GcsWorkloadIdentityArgs.ksa_name": key("ksa_name"),
        "GcsWorkloadIdentityArgs.bucket_deletion": key("bucket_deletion"),
        "RayTpuClusterArgs.name": key("ray_cluster_name"),
        "RayTpuClusterArgs.compute_class": key("ray_cluster_name"),
        "RayTpuClusterArgs.namespace": key("namespace"),
        "RayTpuClusterArgs.service_account": key("ksa_name"),
        "RayTpuClusterArgs.generation": key("tpu_generation"),
        "RayTpuClusterArgs.topology": key("tpu_topology"),
        "RayTpuClusterArgs.num_slices": key("num_slices"),
        "RayTpuClusterArgs.min_slices": key("elastic_min_slices"),
        "RayTpuClusterArgs.dcn_interfaces": key("dcn_cidrs"),
        "RayTpuClusterArgs.image": key("ray_image"),
        "RayTpuClusterArgs.megascale_port": key("megascale_port"),
        "RayTpuClusterArgs.capacity": key("capacity"),
        "RayTpuClusterArgs.scale_to_zero": key("scale_to_zero"),
        "RayTpuClusterArgs.idle_timeout_s": key("idle_timeout_seconds"),
        **{f"MaxTextRunArgs.{field}": key("runs") for field in MaxTextRunArgs.__annotations__},
    }


@contextmanager
def config_keys(cfg: StackConfig) -> Iterator[None]:
    """Errors raised inside components name the config key the user sets, not the component argument."""
    try:
        yield
    except ConfigError as error:
        renamed = component_keys(cfg).get(error.key)
        if renamed is None:
            raise
        raise error.renamed(renamed) from None
