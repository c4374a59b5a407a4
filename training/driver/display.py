"""What the submit command shows a person: its own notes, and one record per training step.

On a terminal the steps are a progress bar (rich) with the loss, tokens/s per
device, the step time, the ETA, and the restarts and restores so far; the
command's notes print above it. Anywhere else (CI, a pipe, a file) each step
is one plain line, so logs stay greppable. Every line the command prints goes
to stderr prefixed ``[submit]``; the job's own log goes to a file, or to
stdout as well with ``--verbose``.
"""

from __future__ import annotations

import sys
from typing import Optional, TextIO

from gke_ray_tpu.training.driver.progress import News, Restarted, Restored, StepMetrics, StillWaiting, WaitingForSlices

PREFIX = "[submit]"


class PlainDisplay:
    """One line per note and per step."""

    def __init__(self, total_steps: Optional[int], stream: TextIO):
        self.total_steps = total_steps
        self.stream = stream

    def note(self, message: str) -> None:
        print(f"{PREFIX} {message}", file=self.stream, flush=True)

    def news(self, item: News) -> None:
        self.note(item.describe(self.total_steps))

    def close(self) -> None:
        pass


class BarDisplay(PlainDisplay):
    """A progress bar for the steps; notes, restarts and restores print above it."""

    def __init__(self, total_steps: Optional[int], stream: TextIO):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        super().__init__(total_steps, stream)
        self.console = Console(file=stream, force_terminal=True, highlight=False)
        self.restarts = 0
        self.restores = 0
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[metrics]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[recovery]}"),
            console=self.console,
            transient=False,
        )
        self.task = self.bar.add_task("steps", total=total_steps, metrics="waiting for the first step", recovery="")
        self.bar.start()

    def note(self, message: str) -> None:
        self.console.print(f"{PREFIX} {message}", markup=False)

    def news(self, item: News) -> None:
        if isinstance(item, StepMetrics):
            parts = [f"loss {item.loss:.3f}"]
            if item.tokens_per_device is not None:
                parts.append(f"{item.tokens_per_device:,.0f} tok/s/dev")
            if item.seconds is not None:
                parts.append(f"{item.seconds:.3f} s/step")
            self.bar.update(self.task, completed=item.step + 1, metrics="  ".join(parts))
            return
        if isinstance(item, (WaitingForSlices, StillWaiting)):
            self.bar.update(self.task, metrics="waiting for TPU slices")
        elif isinstance(item, Restarted):
            self.restarts += 1
        elif isinstance(item, Restored):
            self.restores += 1
        self.bar.update(self.task, recovery=f"restarts {self.restarts} restores {self.restores}")
        self.note(item.describe(self.total_steps))

    def close(self) -> None:
        self.bar.stop()


def for_stream(total_steps: Optional[int], stream: Optional[TextIO] = None) -> PlainDisplay:
    """A bar on a terminal, plain lines anywhere else (default stream: stderr, as it is now)."""
    stream = stream or sys.stderr
    return BarDisplay(total_steps, stream) if stream.isatty() else PlainDisplay(total_steps, stream)
