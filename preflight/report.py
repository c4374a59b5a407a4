"""One run against its slices, before any TPU is paid for: the sharding verdict, the HBM estimate, the step time and
the cost, and XLA's verdict where the compile check ran; as lines a reviewer reads and as JSON.

Sharding that cannot map onto the slices is an error (the job would fail at step 0 after the TPUs are paid for);
an HBM estimate over the chip's memory is a warning, because it is an estimate; the cost is information. The
sharding rule itself lives in ``gke_ray_tpu.core.sharding`` (every JobSpec, MaxTextRun and the worker apply it
too); this module words its verdict for a preview. ``pulumi preview`` (through ``stack/checks.py``) and the
offline preview (``python -m gke_ray_tpu.stack.preview``) both print these reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import JobSpec
from gke_ray_tpu.core.maxtext import BASE_DEFAULTS, Value, render
from gke_ray_tpu.core.models import COMPILE_CHECK
from gke_ray_tpu.core.parallelism import check_elastic
from gke_ray_tpu.core.presets import DEFAULT_PRESET, get_preset
from gke_ray_tpu.core.sharding import check_sharding
from gke_ray_tpu.core.tpu_catalogue import SliceShape
from gke_ray_tpu.preflight import xla_check
from gke_ray_tpu.preflight.cost import CostEstimate, estimate_cost
from gke_ray_tpu.preflight.flops import estimate_step_time
from gke_ray_tpu.preflight.memory import HbmBreakdown, estimate_hbm_from_config


@dataclass
class PreflightReport:
    slice_counts: tuple[int, ...]
    errors: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    hbm: Optional[HbmBreakdown] = None
    cost: Optional[CostEstimate] = None

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def estimate_by_slices(self) -> dict[int, float]:
        """The HBM estimate's total per JAX device (as XLA's figures are), for the one slice count it is made for
        (the largest)."""
        return {} if self.hbm is None else {max(self.slice_counts): self.hbm.total_per_device_gib}

    def format(self) -> str:
        counts = ", ".join(str(n) for n in self.slice_counts)
        lines = [f"Sharding over {counts} slice(s): " + ("OK" if self.ok else "MISMATCH")]
        lines += [f"  error: {error}" for error in self.errors]
        if self.hbm is not None:
            lines.append(self.hbm.format())
        if self.cost is not None:
            lines.append(self.cost.format())
        lines += [f"warning: {warning}" for warning in self.warnings]
        return "\n".join(lines)


def check_run(
    maxtext: Mapping[str, object], shape: SliceShape, num_slices: int, min_slices: int, *, region: str, spot: bool,
    compile_key: str,
) -> PreflightReport:
    """A MaxText key/value config on ``num_slices`` slices of ``shape``, and on every smaller count down to
    ``min_slices`` (an elastic run's Ray Train may restart it on fewer slices; a static run's is ``num_slices``).

    ``compile_key``: the config key that turns the compile check on for declared runs, named where the estimate is
    uncertain."""
    report = PreflightReport(slice_counts=tuple(range(num_slices, min_slices - 1, -1)))
    try:
        devices = shape.chips * shape.generation.jax_devices_per_chip
        check_elastic(maxtext, devices, min_slices, num_slices, slice_name=f"{shape.pod_type} slice")
        check_sharding(maxtext, shape, report.slice_counts, f"{shape.pod_type} slice")
    except ConfigError as error:
        report.errors.append(error)
        return report

    try:
        report.hbm = estimate_hbm_from_config(maxtext, shape, num_slices)
    except ConfigError as error:
        report.warnings.append(f"no HBM estimate: {error}")
    else:
        if report.hbm.does_not_fit:
            report.warnings.append(
                f"estimated {report.hbm.total_gib:.2f} GiB per chip exceeds the usable "
                f"{report.hbm.usable_gib:.2f} GiB of a {shape.generation.name} chip: "
                "expect out-of-memory at compile time"
            )
        elif not report.hbm.fits:
            report.warnings.append(
                f"estimated {report.hbm.total_gib:.2f} GiB per chip is within the estimate's error of XLA's "
                f"{report.hbm.usable_gib:.2f} GiB limit on a {shape.generation.name} chip: uncertain, run the "
                f"compile check ({COMPILE_CHECK}; for declared runs {compile_key} true)"
            )

    model = maxtext.get("model_name")
    steps = maxtext.get("steps")
    if isinstance(model, str) and isinstance(steps, int):
        try:
            values = {**BASE_DEFAULTS, **maxtext}
            step = estimate_step_time(
                model, shape, float(values["per_device_batch_size"]), int(values["max_target_length"]),
                remat_policy=str(values["remat_policy"]), tensors_on_device=tuple(values.get("tensors_on_device") or ()),
            )
            report.cost = estimate_cost(shape, num_slices, steps, step, spot=spot, region=region)
        except ConfigError as error:
            report.warnings.append(f"no cost estimate: {error}")
    return report


def planned_run(preset_name: Optional[str], overrides: Mapping[str, Value], key: str) -> tuple[dict[str, Value], bool]:
    """The MaxText settings of a training preset (``key``: where its name was set) with overrides, and whether it is
    elastic."""
    preset = get_preset(preset_name or DEFAULT_PRESET, key=key)
    return {**preset.maxtext, **overrides}, preset.elastic


def declared_run_refusal(report: PreflightReport, shape: SliceShape, key: str, name: str, compile_key: str, *,
                         compiled: bool) -> Optional[ConfigError]:
    """Why a run ``pulumi up`` applies (``key``: where it is declared) fails preview before any compile: it cannot
    shard on ``shape``'s slices or, unless XLA decides the fit (``compiled``), the estimate is sure it does not fit
    (None: it may go on)."""
    if report.errors:
        return report.errors[0].renamed(key)
    hbm = report.hbm
    if compiled or hbm is None or not hbm.does_not_fit:
        return None
    return ConfigError(
        key, name,
        f"a run that fits the chips: estimated {hbm.total_gib:.2f} GiB per chip, {hbm.usable_gib:.2f} GiB usable on "
        f"{shape.generation.name} (lower per_device_batch_size, bfloat16 weights, remat_policy full, more fsdp; or "
        f"{compile_key} true for XLA's own verdict)",
    )


def compiled_verdict(job: JobSpec, pod_flags: Iterable[str], report: PreflightReport, key: str, name: str,
                     compile_key: str) -> str:
    """XLA's figures for a declared run at each slice count it may train on, under the pods' flags; a run XLA does
    not compile at some count fails preview under its ``key``, naming the count."""
    try:
        results = xla_check.check_job(job, pod_flags, report.slice_counts)
    except xla_check.CompileCheckError as error:
        raise ConfigError(compile_key, True, f"a compile check that can run here: {error}") from None
    if not results.fits:
        counts = ", ".join(str(n) for n in sorted(report.slice_counts))
        raise ConfigError(
            key, name, f"a run XLA compiles within the chips' HBM at each slice count it may train on ({counts}): "
            + results.refusal(),
        )
    return results.format(report.estimate_by_slices)


def training_section(maxtext: Mapping[str, Value], report: PreflightReport,
                     xla: Optional[xla_check.SliceCountResults]) -> list[str]:
    """The planned run as the preview prints it: its settings and report, then XLA's figures where it compiled."""
    settings = " ".join(f"{key}={render(value)}" for key, value in maxtext.items())
    sections = [f"Planned run: {settings}\n" + report.format()]
    if xla is not None:
        sections.append(xla.format(report.estimate_by_slices))
    return sections


def training_json(stack: str, maxtext: dict, report: PreflightReport, xla: Optional[xla_check.SliceCountResults]) -> dict:
    """The training section as data: the run, its sharding, the estimate and, with --compile, XLA's figures
    (``xla``: the worst slice count; ``xla_by_slices``: each count)."""
    hbm = report.hbm
    estimate = None if hbm is None else {
        "total_gib": hbm.total_gib,
        "usable_gib": hbm.usable_gib,
        "margin_gib": hbm.margin_gib,
        "verdict": hbm.verdict,
        "breakdown_gib": dict(hbm.rows()),
    }
    out = {
        "stack": stack,
        "run": maxtext,
        "sharding": {"ok": report.ok, "slice_counts": list(report.slice_counts), "errors": [str(e) for e in report.errors]},
        "estimate": estimate,
        "warnings": report.warnings,
    }
    if xla is not None:
        out.update(xla.to_json(report.estimate_by_slices))
    return out
