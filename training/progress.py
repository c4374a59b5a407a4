"""Training progress, read from MaxText's own log lines.

MaxText (``common/metric_logger.py``) prints one line per step, e.g.::

    completed step: 99, seconds: 0.693, TFLOP/s/device: 83.171, Tokens/s/device: 11819.175, total_weights: 262144, loss: 0.334

(0.2.5 appends ``lm_loss`` and ``perplexity``; elastic runs insert ``live slice
count``). Through Ray the line carries a ``(RayTrainWorker pid=...)`` prefix and
sometimes a ``[repeated 6x across cluster]`` suffix; every worker prints it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STEP = re.compile(r"completed step: (\d+)((?:, [^,:]+: [^,\s]+)*)")
_FIELD = re.compile(r", ([^,:]+): ([^,\s]+)")


@dataclass(frozen=True)
class StepMetrics:
    step: int
    loss: float
    seconds: float | None = None
    tflops_per_device: float | None = None
    tokens_per_device: float | None = None

    def describe(self, total_steps: int | None = None) -> str:
        of = f"/{total_steps}" if total_steps else ""
        parts = [f"step {self.step + 1}{of}", f"loss {self.loss:.3f}"]
        if self.tflops_per_device is not None:
            parts.append(f"{self.tflops_per_device:.3f} TFLOP/s/device")
        if self.tokens_per_device is not None:
            parts.append(f"{self.tokens_per_device:.1f} tokens/s/device")
        if self.seconds is not None:
            parts.append(f"{self.seconds:.3f} s/step")
        return "  ".join(parts)


def parse_line(line: str) -> StepMetrics | None:
    """The metrics of one MaxText step line, or None for any other line."""
    m = _STEP.search(line)
    if not m:
        return None
    fields = dict(_FIELD.findall(m.group(2)))
    if "loss" not in fields:
        return None  # a profiler boundary step or a rampup line without a loss
    num = lambda key: float(fields[key]) if key in fields else None  # noqa: E731
    return StepMetrics(
        step=int(m.group(1)),
        loss=float(fields["loss"]),
        seconds=num("seconds"),
        tflops_per_device=num("TFLOP/s/device"),
        tokens_per_device=num("Tokens/s/device"),
    )


@dataclass
class Progress:
    """Feed it log chunks as they stream; it keeps one record per step.

    Chunks may split lines anywhere. A step seen again (every worker prints it,
    and a restarted run repeats the steps after its last checkpoint) replaces
    the earlier record, so ``steps`` ends as the run's final history.
    """

    steps: dict[int, StepMetrics] = field(default_factory=dict)
    _partial: str = ""

    def feed(self, chunk: str) -> list[StepMetrics]:
        """The steps this chunk completed that were not reported already."""
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        new = []
        for line in lines:
            metrics = parse_line(line)
            if metrics is None:
                continue
            if metrics.step not in self.steps:
                new.append(metrics)
            self.steps[metrics.step] = metrics
        return new

    def flush(self) -> list[StepMetrics]:
        """Parse a trailing line that had no newline."""
        rest, self._partial = self._partial, ""
        return self.feed(rest + "\n") if rest else []

    @property
    def first(self) -> StepMetrics | None:
        return self.steps[min(self.steps)] if self.steps else None

    @property
    def last(self) -> StepMetrics | None:
        return self.steps[max(self.steps)] if self.steps else None
