"""A run's loss and throughput per step, as a PNG: ``python -m training.report <run name | run dir>``.

Reads what MaxText itself writes: its TensorBoard event files under
``<base_output_directory>/<run_name>/tensorboard/`` (process 0 writes them;
every start of a worker group opens a new file, which is how restarts are
found). The directory may be local or a ``gs://`` URL (any fsspec filesystem).
The event files are TFRecords of ``Event`` protos (tensorboardX ships the
protos and the checksum); a half-written last record of a killed writer is
skipped. The picture is drawn with Pillow: loss on top, tokens/s per device
below, a dashed line where the worker group restarted.

    python -m training.report local-tiny-20261203-101500          # under local-runs/
    python -m training.report gs://my-bucket/rayjob-elastic-8b-20261203-101500
"""

from __future__ import annotations

import argparse
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from core.job_spec import JobSpec, run_location
from training.driver.request import DEFAULT_LOCAL_DIR

LOSS = "learning/loss"
TOKENS = "perf/per_device_tokens_per_sec"
STEP_TIME = "perf/step_time_seconds"
SIZE = (960, 640)


class NoMetrics(Exception):
    """Nothing to draw: no event files, or none with a loss."""


@dataclass
class RunMetrics:
    """Scalars per tag and step (a step run again after a restore keeps its last value)."""

    scalars: dict[str, dict[int, float]] = field(default_factory=dict)
    restarts: list[int] = field(default_factory=list)
    """The first step logged by each worker group after the first."""
    files: list[str] = field(default_factory=list)

    def series(self, tag: str) -> list[tuple[int, float]]:
        return sorted(self.scalars.get(tag, {}).items())


def metrics_dir(spec: JobSpec, bucket: Optional[str] = None) -> str:
    """Where MaxText writes the run's event files, as this machine reaches it (``core.job_spec.run_location``)."""
    return run_location(spec, "tensorboard", bucket)


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
                if value.tag == LOSS and first_step is None:
                    first_step = int(event.step)
        if position > 0 and first_step is not None:
            metrics.restarts.append(first_step)
    return metrics


def write_report(directory: str, png: Path, title: str) -> Path:
    """Draw the run's loss and tokens/s per device per step into ``png``; raises NoMetrics if there is no loss."""
    metrics = read_metrics(directory)
    if not metrics.series(LOSS):
        found = f"{len(metrics.files)} event files without a {LOSS}" if metrics.files else "no event files"
        raise NoMetrics(f"{found} under {directory}")
    png.parent.mkdir(parents=True, exist_ok=True)
    draw(metrics, title).save(png)
    return png


def draw(metrics: RunMetrics, title: str):
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", SIZE, "white")
    pen = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    pen.text((60, 12), title, fill="black", font=font)
    steps = [step for step, _ in metrics.series(LOSS)]
    panels = [(LOSS, "loss", (30, 90, 200), (40, 330)), (TOKENS, "tokens/s/device", (200, 90, 30), (350, 610))]
    for tag, label, colour, (top, bottom) in panels:
        _panel(pen, font, metrics.series(tag), (min(steps), max(steps)), metrics.restarts, label, colour, top, bottom)
    return image


def _panel(pen, font, points, step_range, restarts, label, colour, top, bottom) -> None:
    left, right = 90, SIZE[0] - 30
    pen.rectangle([left, top, right, bottom], outline="black")
    pen.text((left + 6, top + 4), label, fill=colour, font=font)
    if not points:
        pen.text((left + 6, top + 20), "(not logged)", fill="grey", font=font)
        return
    first, last = step_range
    span = max(last - first, 1)
    values = [value for _, value in points]
    low, high = min(values), max(values)
    if high == low:
        high = low + abs(low) * 0.01 + 1e-9

    def x(step: int) -> float:
        return left + (step - first) / span * (right - left)

    def y(value: float) -> float:
        return bottom - (value - low) / (high - low) * (bottom - top - 24) - 4

    for step in restarts:
        for start in range(top, bottom, 8):
            pen.line([(x(step), start), (x(step), min(start + 4, bottom))], fill="red", width=1)
    coords = [(x(step), y(value)) for step, value in points]
    if len(coords) > 1:
        pen.line(coords, fill=colour, width=2)
    for cx, cy in coords:
        pen.ellipse([cx - 2, cy - 2, cx + 2, cy + 2], fill=colour)
    pen.text((6, top + 18), f"{high:.4g}", fill="black", font=font)
    pen.text((6, bottom - 12), f"{low:.4g}", fill="black", font=font)
    pen.text((left, bottom + 4), f"step {first}", fill="black", font=font)
    pen.text((right - 60, bottom + 4), f"step {last}", fill="black", font=font)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run name (under --output-dir), a run directory, or a gs:// run URL")
    parser.add_argument("--output-dir", default=str(DEFAULT_LOCAL_DIR), help="where local runs are (default local-runs/)")
    parser.add_argument("-o", "--png", help="the PNG to write (default: <run dir>/report.png, ./<run>.png for gs://)")
    args = parser.parse_args(argv)
    run = args.run.rstrip("/")
    remote = "://" in run
    run_dir = run if remote or Path(run).is_dir() else str(Path(args.output_dir) / run)
    name = run.rsplit("/", 1)[-1]
    png = Path(args.png) if args.png else (Path(f"{name}.png") if remote else Path(run_dir) / "report.png")
    try:
        written = write_report(f"{run_dir}/tensorboard", png, title=name)
    except NoMetrics as error:
        print(f"python -m training.report: error: {error}", file=sys.stderr)
        return 1
    print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
