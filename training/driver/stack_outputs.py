"""The stack outputs the submit command reads (the contract is docs/deploy.md's "Stack outputs").

Two sources: a JSON file (``pulumi stack output --json > outputs.json``, or
``-`` for stdin), or a stack selected through the Pulumi Automation API (which
runs the same ``pulumi stack output`` for us and needs the CLI and a login).
Whatever the source, the values are checked once here, including against the
TPU catalogue the trainer uses, so a stack and a trainer that disagree about a
slice fail before anything is submitted.
"""

from __future__ import annotations

import json
import sys
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from gke_ray_tpu.core import REPO_ROOT
from gke_ray_tpu.core.capacity import CAPACITY, CAPACITY_MODES, CapacityMode
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.prices import chip_price
from gke_ray_tpu.core.job_spec import bucket_url
from gke_ray_tpu.core.ray_job import own_cluster_problems
from gke_ray_tpu.core.slices import NUM_SLICES, elastic_min_slices
from gke_ray_tpu.core.tpu_catalogue import slice_shape

Text = Annotated[StrictStr, Field(pattern=r"\S")]
"""A string with something in it."""


class StackOutputs(BaseModel):
    """The outputs, by their Python names; the stack exports them in camelCase (``numSlices``)."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, extra="ignore")

    project: Text
    region: Text
    cluster_name: Text
    cluster_location: Text
    """With ``project`` and ``cluster_name``: the GKE cluster, whose kubeconfig context the command insists on."""
    namespace: Text
    bucket_name: Text
    ray_head_service: Text
    ray_dashboard_port: StrictInt = Field(ge=1, le=65535)
    checkpoint_dir: Text
    """``gs://<bucket_name>``: where cluster runs write checkpoints and metrics (Orbax's commit markers)."""
    tpu_generation: Text
    accelerator_type: Text
    topology: Text
    num_slices: StrictInt = Field(ge=NUM_SLICES.low, le=NUM_SLICES.high)
    hosts_per_slice: StrictInt
    chips_per_host: StrictInt
    chips_per_slice: StrictInt
    elastic_min_slices: StrictInt
    capacity: Literal[CAPACITY_MODES]
    """How the slices' VMs are obtained (gke_ray_tpu.core.capacity): on Spot the job must expect to lose one and restart."""
    scale_to_zero: StrictBool
    """The stack keeps no slice while idle: each run is a RayJob that brings its own RayCluster
    (``ray_cluster_spec``, ``gke_ray_tpu.training.driver.run_cluster``) and waits minutes for its slices."""
    ray_cluster_spec: Optional[dict[str, Any]] = None
    """The RayCluster spec every run brings (a RayJob's ``rayClusterSpec``), exported exactly when the stack
    scales to zero; None: the stack's long-lived RayCluster runs jobs."""
    local_queue: Optional[Text] = None
    """The LocalQueue every run of a stack that scales to zero waits in (TpuQueue's); None: no queue (a held
    stack, or one deployed before its runs were queued)."""
    cluster_queue: Optional[Text] = None
    """The ClusterQueue behind it: what a run is checked against before it is queued."""
    pods_ready_timeout_s: Optional[StrictInt] = None
    """Kueue's PodsReady timeout where the stack installed Kueue; None: unknown (the cluster's own Kueue)."""
    requeue_limit: Optional[StrictInt] = None
    """Requeues before Kueue gives a run up, where the stack installed Kueue."""

    @property
    def queue_wait(self):
        """The queue's waiting settings (None without a queue); with the cluster's own Kueue, Kueue 0.19's defaults
        (a 1800 s timeout, requeued for ever), which that Kueue may not keep."""
        from gke_ray_tpu.core.kueue_waiting import WaitSettings

        if self.local_queue is None:
            return None
        if self.pods_ready_timeout_s is None:
            return WaitSettings(requeue_limit=None)
        return WaitSettings(timeout_s=self.pods_ready_timeout_s, requeue_limit=self.requeue_limit)

    @property
    def capacity_mode(self) -> CapacityMode:
        return CAPACITY[self.capacity]

    @cached_property
    def chip_rate(self) -> tuple[float | None, str]:
        """The list price of one of the stack's TPU chips for an hour, and what it is (None: no price here)."""
        try:
            price = chip_price(self.tpu_generation, self.region)
        except ConfigError as e:
            return None, f"no list price here for {self.tpu_generation} in {self.region}: {e}"
        mode = self.capacity_mode
        return price.usd_per_chip_hour(mode.spot), \
            f"{mode.price_basis}, {self.tpu_generation} in {self.region}, {price.as_of}"

    @model_validator(mode="after")
    def _agree(self) -> "StackOutputs":
        """The outputs agree with each other, with the TPU catalogue the trainer uses, and with where runs write."""
        shape = slice_shape(self.tpu_generation, self.topology, key="topology", generation_key="tpuGeneration")
        derived = {
            "acceleratorType": (self.accelerator_type, shape.generation.ray_accelerator_type),
            "hostsPerSlice": (self.hosts_per_slice, shape.hosts),
            "chipsPerHost": (self.chips_per_host, shape.chips_per_host),
            "chipsPerSlice": (self.chips_per_slice, shape.chips),
        }
        for key, (got, want) in derived.items():
            if got != want:
                raise ConfigError(key, got, f"{want!r} for a {shape.generation.name} {shape.topology} slice")
        if self.checkpoint_dir.rstrip("/") != bucket_url(self.bucket_name):
            raise ConfigError(
                "checkpointDir", self.checkpoint_dir,
                f"{bucket_url(self.bucket_name)}, the bucket runs write checkpoints to (a stack deployed before "
                "checkpoints went straight to the bucket exports /data: run `pulumi up` to update its outputs)",
            )
        self._agree_on_scale_to_zero()
        elastic_min_slices(self.elastic_min_slices, self.num_slices, "elasticMinSlices", "numSlices")
        return self

    def _agree_on_scale_to_zero(self) -> None:
        """A stack exports the spec of the cluster each run brings exactly when it scales to zero."""
        if self.ray_cluster_spec is not None and not self.scale_to_zero:
            raise ConfigError(
                "rayClusterSpec", "(set)", "no rayClusterSpec on a stack that holds its slices (scaleToZero "
                "false): its jobs run on its RayCluster"
            )
        if self.local_queue is not None and not self.scale_to_zero:
            raise ConfigError("localQueue", self.local_queue, "null on a stack that holds its slices (scaleToZero "
                              "false): its jobs run on its RayCluster, unqueued")
        if self.ray_cluster_spec is None and self.scale_to_zero:
            raise ConfigError(
                "rayClusterSpec", None, "the RayCluster spec each run brings, which a stack that scales to zero "
                "exports (a stack deployed before runs brought their own cluster: run `pulumi up` to update it)"
            )
        if self.ray_cluster_spec is not None:
            # What KubeRay (and Kueue, later) would refuse in a run's RayJob, refused before one is created.
            problems = own_cluster_problems(self.ray_cluster_spec)
            if problems:
                raise ConfigError("rayClusterSpec", "(the stack's)", "a run's cluster spec: " + "; ".join(problems))


_FIELDS = {field.alias: name for name, field in StackOutputs.model_fields.items()}


def _kind(annotation: object) -> type:
    """The Python type of an output: under Annotated[...], or of a Literal's values."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return type(get_args(annotation)[0])
    if get_origin(annotation) is Union:  # Optional[...]
        annotation = get_args(annotation)[0]
    return get_origin(annotation) or annotation  # type: ignore[return-value]


_EXPECTED = {"rayDashboardPort": "a TCP port (1-65535)", "capacity": f"one of {', '.join(CAPACITY_MODES)}",
             "numSlices": NUM_SLICES.words()}
"""What the bounds of an output allow (its type alone says the rest)."""


def from_mapping(raw: object, source: str) -> StackOutputs:
    """Check the outputs (camelCase, as Pulumi prints them) and convert them."""
    if not isinstance(raw, dict):
        raise ConfigError(source, type(raw).__name__, "a JSON object of stack outputs")
    try:
        return StackOutputs.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):
            raise cause.renamed(f"{source}: {cause.key}") from None
        (key,) = first["loc"]
        kind = _kind(StackOutputs.model_fields[_FIELDS[key]].annotation).__name__
        if first["type"] == "missing":
            expected = f"a {kind} output, which the stack exports (docs/deploy.md: 'Stack outputs')"
        elif first["type"].endswith("_type"):
            expected = f"a {kind}"
        elif first["type"] == "string_pattern_mismatch":
            expected = f"a non-empty {kind}"
        else:
            expected = _EXPECTED[key]
        raise ConfigError(f"{source}: {key}", raw.get(key), expected) from None


def load_file(path: str) -> StackOutputs:
    """``pulumi stack output --json`` saved to ``path`` (``-``: read stdin)."""
    source = "stdin" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise ConfigError("--outputs-file", path, f"a readable file ({e.strerror})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            "--outputs-file", path, f"the JSON of `pulumi stack output --json` ({e.msg} at line {e.lineno})"
        ) from None
    return from_mapping(raw, source)


def load_stack(stack: str, work_dir: Path = REPO_ROOT) -> StackOutputs:
    """The outputs of ``stack`` through the Automation API (pulumi CLI + login)."""
    from pulumi import automation

    try:
        selected = automation.select_stack(stack_name=stack, work_dir=str(work_dir))
        raw = {key: out.value for key, out in selected.outputs().items()}
    except FileNotFoundError:
        raise ConfigError(
            "--stack", stack, "a stack the `pulumi` CLI can read, but no `pulumi` is on PATH "
            "(or pass --outputs-file)"
        ) from None
    except (automation.CommandError, automation.InvalidVersionError) as e:
        lines = [line for line in str(e).splitlines() if line.strip()]
        raise ConfigError(
            "--stack", stack, f"a deployed stack readable with `pulumi stack output` ({lines[-1] if lines else e})"
        ) from None
    return from_mapping(raw, f"stack {stack}")
