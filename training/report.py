"""Where a run's TPU hours went, and its loss and throughput: ``python -m gke_ray_tpu.training.report <run> [--json]``.

Prints the run's goodput table (``gke_ray_tpu.training.goodput``: productive steps, start-up,
compilation, checkpoint saving and restoring, recovery after restarts, lost
progress, other; seconds, share and money) and draws ``report.png``: loss and
tokens/s per device over the steps, a dashed line where the worker group
restarted, and a bar of the goodput buckets. ``--json`` prints one JSON object
instead of the table.

The sources are what the run already writes. MaxText's TensorBoard event files
under ``<base_output_directory>/<run_name>/tensorboard/`` (process 0 writes them;
every start of a worker group opens a new file, which is how restarts are found),
local or ``gs://`` (any fsspec filesystem); they are TFRecords of ``Event`` protos
(tensorboardX ships the protos and the checksum), and a half-written last record
of a killed writer is skipped. The goodput also needs the job's log and record,
which ``gke_ray_tpu.training.submit`` keeps in the run's directory on this machine
(``gke_ray_tpu.training.driver.run_files``).

    python -m gke_ray_tpu.training.report local-tiny-20261203-101500          # under local-runs/
    python -m gke_ray_tpu.training.report local-tiny-20261203-101500 --json
    python -m gke_ray_tpu.training.report gs://my-bucket/rayjob-elastic-8b-20261203-101500
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from gke_ray_tpu.core.exit_status import NO, OK, run_command
from gke_ray_tpu.training.driver import retry
from gke_ray_tpu.training.driver.request import DEFAULT_LOCAL_DIR
from gke_ray_tpu.training.driver.run_files import FIGURE, JOB_LOG, JOB_RECORD, JobRecord
from gke_ray_tpu.training.goodput import BUCKETS, LABELS, Goodput, account

LOSS = "learning/loss"
TOKENS = "perf/per_device_tokens_per_sec"
FIGURE_INCHES = (10.0, 8.0)
DPI = 110
BUCKET_COLOURS = {
    "productive": "#2e7d32",
    "startup": "#90a4ae",
    "compilation": "#7e57c2",
    "checkpoint_save": "#fb8c00",
    "checkpoint_restore": "#fdd835",
    "recovery": "#e53935",
    "lost_progress": "#8e0000",
    "other": "#d7d7d7",
}


@dataclass
class RunMetrics:
    """Scalars per tag and step (a step run again after a restore keeps its last value)."""

    scalars: dict[str, dict[int, float]] = field(default_factory=dict)
    wall_times: dict[int, float] = field(default_factory=dict)
    """When the loss of each step was written (epoch seconds; its last execution)."""
    restarts: list[int] = field(default_factory=list)
    """The first step logged by each worker group after the first."""
    files: list[str] = field(default_factory=list)

    def series(self, tag: str) -> list[tuple[int, float]]:
        return sorted(self.scalars.get(tag, {}).items())


@dataclass(frozen=True)
class Report:
    goodput: Optional[Goodput]
    no_goodput: str
    """Why there is no goodput (which file is missing), when there is none."""
    figure: Optional[Path]
    no_figure: str
    """Why nothing was drawn (no event file with a loss), when nothing was."""


def _records(data: bytes):
    from tensorboardX.record_writer import masked_crc32c

    offset = 0
    while offset + 12 <= len(data):
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        end = offset + 12 + length + 4
        if end > len(data):
            return  # the tail a killed writer left half-written
        (header_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        body = data[offset + 12:offset + 12 + length]
        (body_crc,) = struct.unpack("<I", data[end - 4:end])
        if header_crc != masked_crc32c(header) or body_crc != masked_crc32c(body):
            return
        yield body
        offset = end


def read_metrics(directory: str) -> RunMetrics:
    """Every scalar in the event files under ``directory`` (local path or URL), in file order."""
    import fsspec
    from tensorboardX.proto import event_pb2

    fs, root = fsspec.core.url_to_fs(directory)
    files = sorted(fs.glob(f"{root.rstrip('/')}/**/events.out.tfevents.*"))
    metrics = RunMetrics(files=list(files))
    for position, path in enumerate(files):
        first_step = None
        with fs.open(path, "rb") as handle:
            data = handle.read()
        for body in _records(data):
            event = event_pb2.Event.FromString(body)
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    number = value.simple_value
                elif value.HasField("tensor") and value.tensor.float_val:
                    number = value.tensor.float_val[0]
                else:
                    continue
                metrics.scalars.setdefault(value.tag, {})[int(event.step)] = float(number)
                if value.tag == LOSS:
                    metrics.wall_times[int(event.step)] = event.wall_time
                    if first_step is None:
                        first_step = int(event.step)
        if position > 0 and first_step is not None:
            metrics.restarts.append(first_step)
    return metrics


def goodput_of(run_dir: Path, wall_times: dict[int, float]) -> tuple[Optional[Goodput], str]:
    """The goodput of the job whose log and record are in ``run_dir``, or None and why not."""
    from gke_ray_tpu.training.driver.timeline import read_times

    try:
        record = JobRecord.load(run_dir)
        log = (run_dir / JOB_LOG).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError as e:
        return None, (f"no goodput: no {Path(e.filename).name} in {run_dir} "
                      "(gke_ray_tpu.training.submit writes it for the runs it submits or follows)")
    if record.ended_at is None:
        return None, f"no goodput: {record.submission_id} had not ended when {JOB_RECORD} was written"
    return account(read_times(log, record.submitted_at, record.ended_at, wall_times), record.usd_per_hour), ""


def draw(metrics: RunMetrics, goodput: Optional[Goodput], title: str, png: Path) -> Path:
    """Loss and tokens/s per device per step, restarts marked, and the goodput bar (if known), into ``png``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=FIGURE_INCHES, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    rows = [3, 3, 1.6] if goodput else [3, 3]
    axes = figure.subplots(len(rows), 1, height_ratios=rows)
    loss_axis, tokens_axis = axes[0], axes[1]
    tokens_axis.sharex(loss_axis)
    for axis, tag, label, colour in (
        (loss_axis, LOSS, "loss", "#1565c0"), (tokens_axis, TOKENS, "tokens/s per device", "#ef6c00"),
    ):
        points = metrics.series(tag)
        if points:
            axis.plot([s for s, _ in points], [v for _, v in points], color=colour, marker="o", markersize=3, linewidth=1.6)
        else:
            axis.text(0.5, 0.5, f"{tag} not logged", transform=axis.transAxes, ha="center", color="grey")
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
        for number, step in enumerate(metrics.restarts, start=1):
            axis.axvline(step - 0.5, color="#c62828", linestyle="--", linewidth=1.2,
                         label=f"restart {number}: resumed at step {step}" if axis is loss_axis else None)
    loss_axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    loss_axis.tick_params(labelbottom=False)
    tokens_axis.set_xlabel("step")
    tokens_axis.yaxis.set_major_formatter("{x:,.0f}")
    if metrics.restarts:
        loss_axis.legend(loc="upper right", frameon=False)
    if goodput:
        _goodput_bar(axes[2], goodput)
    figure.suptitle(title, fontsize=13)
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png)
    return png


def _time_unit(seconds: float) -> tuple[float, str]:
    """The unit a person reads a duration in: seconds, minutes or hours."""
    if seconds < 600:
        return 1.0, "s"
    return (60.0, "min") if seconds < 3 * 3600 else (3600.0, "h")


def _goodput_bar(axis, goodput: Goodput) -> None:
    scale, unit = _time_unit(goodput.wall_s)
    left = 0.0
    for name in BUCKETS:
        length = goodput.buckets[name] / scale
        if length <= 0:
            continue
        axis.barh(0, length, left=left, color=BUCKET_COLOURS[name], edgecolor="white",
                  label=f"{LABELS[name]} {goodput.percent(name):.0f}%")
        if goodput.percent(name) >= 8:  # a label that fits inside its segment
            axis.text(left + length / 2, 0, f"{goodput.percent(name):.0f}%", ha="center", va="center",
                      color="white" if name in ("productive", "compilation", "recovery", "lost_progress") else "black")
        left += length
    axis.set_xlim(0, max(goodput.wall_s / scale, 1e-9))
    axis.set_yticks([])
    axis.set_xlabel(f"the job's wall time, submission to end ({unit}), by where it went")
    cost = f", ${goodput.wall_s / 3600 * goodput.usd_per_hour:,.2f} of TPU time" if goodput.usd_per_hour else ""
    axis.set_title(f"goodput {goodput.goodput_pct:.1f}%: {goodput.productive_s / scale:,.1f} {unit} of "
                   f"{goodput.wall_s / scale:,.1f} {unit} trained{cost}", loc="left", fontsize=11)
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.55), ncol=4, frameon=False, fontsize=9)


def write_report(run_dir: Path, metrics_at: str, png: Path, title: str) -> Report:
    """The run's goodput (from its job's log and record in ``run_dir``) and its figure, drawn into ``png`` when
    the event files under ``metrics_at`` have a loss."""
    try:
        metrics, unread = read_metrics(metrics_at), ""
    except Exception as e:  # noqa: BLE001 - a bucket this machine may not read (credentials, network)
        metrics, unread = RunMetrics(), f"cannot read {metrics_at} ({retry.reason(e)})"
    goodput, no_goodput = goodput_of(run_dir, metrics.wall_times)
    if not metrics.series(LOSS):
        found = f"{len(metrics.files)} event files without a {LOSS}" if metrics.files else "no event files"
        return Report(goodput, no_goodput, None,
                      unread or f"{found} under {metrics_at} (MaxText writes them from the first step on)")
    draw(metrics, goodput, title, png)
    return Report(goodput, no_goodput, png, "")


def _locate(run: str, output_dir: Path) -> tuple[str, Path, str]:
    """(name, this machine's run directory, where its event files are) of a run name, directory or URL."""
    run = run.rstrip("/")
    name = run.rsplit("/", 1)[-1]
    if "://" in run:
        return name, output_dir / name, f"{run}/tensorboard"
    run_dir = Path(run) if Path(run).is_dir() else output_dir / run
    try:
        return name, run_dir, JobRecord.load(run_dir).metrics_dir
    except FileNotFoundError:
        return name, run_dir, str(run_dir / "tensorboard")


PROG = "python -m gke_ray_tpu.training.report"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run name (under --output-dir), a run directory, or a gs:// run URL")
    parser.add_argument("--output-dir", default=str(DEFAULT_LOCAL_DIR), help="where local runs are (default local-runs/)")
    parser.add_argument("-o", "--png", help=f"the figure to write (default: <run dir>/{FIGURE}, ./<run>.png for gs://)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    return run_command(PROG, lambda: _report(args))


def _report(args: argparse.Namespace) -> int:
    name, run_dir, metrics_at = _locate(args.run, Path(args.output_dir))
    png = Path(args.png) if args.png else (run_dir / FIGURE if run_dir.is_dir() else Path(f"{name}.png"))
    report = write_report(run_dir, metrics_at, png, title=name)
    if report.figure is None:
        print(f"{PROG}: error: {report.no_figure}", file=sys.stderr)
        return NO
    if args.json:
        print(json.dumps({"run": name, "figure": str(png), "goodput": report.goodput.to_json() if report.goodput else None,
                          **({"no_goodput": report.no_goodput} if report.no_goodput else {})}))
    else:
        print(report.goodput.table() if report.goodput else report.no_goodput)
        print(f"figure: {png}")
    return OK


if __name__ == "__main__":
    sys.exit(main())
