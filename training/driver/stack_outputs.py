"""The stack outputs the submit command reads (the contract is the README's "Stack outputs").

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
from dataclasses import dataclass
from pathlib import Path

from core import REPO_ROOT
from core.capacity import CAPACITY_MODES
from core.errors import ConfigError
from core.tpu_catalogue import slice_shape



@dataclass(frozen=True)
class StackOutputs:
    namespace: str
    bucket_name: str
    ray_head_service: str
    ray_dashboard_port: int
    checkpoint_dir: str
    tpu_generation: str
    accelerator_type: str
    topology: str
    num_slices: int
    hosts_per_slice: int
    chips_per_host: int
    chips_per_slice: int
    elastic_min_slices: int
    capacity: str
    """How the slices' VMs are obtained (core.capacity): on Spot the job must expect to lose one and restart."""
    scale_to_zero: bool
    """The cluster keeps no slice while idle: a job waits minutes for its slices to start."""

    @property
    def spot(self) -> bool:
        return self.capacity == "spot"


_FIELDS = {
    "namespace": ("namespace", str),
    "bucketName": ("bucket_name", str),
    "rayHeadService": ("ray_head_service", str),
    "rayDashboardPort": ("ray_dashboard_port", int),
    "checkpointDir": ("checkpoint_dir", str),
    "tpuGeneration": ("tpu_generation", str),
    "acceleratorType": ("accelerator_type", str),
    "topology": ("topology", str),
    "numSlices": ("num_slices", int),
    "hostsPerSlice": ("hosts_per_slice", int),
    "chipsPerHost": ("chips_per_host", int),
    "chipsPerSlice": ("chips_per_slice", int),
    "elasticMinSlices": ("elastic_min_slices", int),
    "capacity": ("capacity", str),
    "scaleToZero": ("scale_to_zero", bool),
}


def from_mapping(raw: object, source: str) -> StackOutputs:
    """Check the outputs (camelCase, as Pulumi prints them) and convert them."""
    if not isinstance(raw, dict):
        raise ConfigError(source, type(raw).__name__, "a JSON object of stack outputs")
    values = {}
    for key, (field, kind) in _FIELDS.items():
        if key not in raw:
            raise ConfigError(
                f"{source}: {key}", None, f"a {kind.__name__} output, which the stack exports (README: 'Stack outputs')"
            )
        value = raw[key]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ConfigError(f"{source}: {key}", value, f"a {kind.__name__}")
        if kind is str and not value.strip():
            raise ConfigError(f"{source}: {key}", value, "a non-empty str")
        values[field] = value
    outputs = StackOutputs(**values)
    if not 1 <= outputs.ray_dashboard_port <= 65535:
        raise ConfigError(f"{source}: rayDashboardPort", outputs.ray_dashboard_port, "a TCP port (1-65535)")
    if outputs.capacity not in CAPACITY_MODES:
        raise ConfigError(f"{source}: capacity", outputs.capacity, f"one of {', '.join(CAPACITY_MODES)}")
    shape = slice_shape(outputs.tpu_generation, outputs.topology, key=f"{source}: topology")
    derived = {
        "acceleratorType": (outputs.accelerator_type, shape.generation.ray_accelerator_type),
        "hostsPerSlice": (outputs.hosts_per_slice, shape.hosts),
        "chipsPerHost": (outputs.chips_per_host, shape.chips_per_host),
        "chipsPerSlice": (outputs.chips_per_slice, shape.chips),
    }
    for key, (got, want) in derived.items():
        if got != want:
            raise ConfigError(
                f"{source}: {key}", got, f"{want!r} for a {shape.generation.name} {shape.topology} slice"
            )
    if not 1 <= outputs.elastic_min_slices <= outputs.num_slices:
        raise ConfigError(
            f"{source}: elasticMinSlices", outputs.elastic_min_slices, f"between 1 and numSlices ({outputs.num_slices})"
        )
    return outputs


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
