"""The submit command's side of the Ray Jobs API: one job per run attempt, calls that survive a hiccup.

Every job of a run has a submission id derived from the run name, so running
the same command again finds the run's jobs instead of starting a second one:

* a job of the run is still PENDING or RUNNING: follow it;
* the latest one SUCCEEDED: report it, submit nothing;
* the latest one FAILED or was STOPPED: submit the next attempt
  (``maxtext-<run>-attempt-<N>``) with the same run_name, so MaxText resumes
  from the run's latest checkpoint.

A run declared in the stack is submitted by KubeRay as
``maxtext-<run>-rayjob-<digest>`` (``gke_ray_tpu.core.job_spec.declared_submission_id``);
those are jobs of the run too, ordered with the others by Ray's start time.

Each call is retried on transient errors (``gke_ray_tpu.training.driver.retry``) and fails as one
``ClusterError`` line, never a traceback.
"""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, Coroutine, Literal, Optional, Sequence

from gke_ray_tpu.training.driver import retry
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import submission_id_for
from gke_ray_tpu.training.driver.errors import ClusterError
from gke_ray_tpu.training.driver.ray_auth import refusal_status

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def attempt_of(run_name: str, submission_id: str | None) -> int | None:
    """The attempt number of a job the submit command submitted for ``run_name``, or None."""
    m = re.fullmatch(rf"maxtext-{re.escape(run_name)}(?:-attempt-([0-9]+))?", submission_id or "")
    return (int(m.group(1)) if m.group(1) else 1) if m else None


def is_job_of(run_name: str, submission_id: str | None) -> bool:
    """A job of ``run_name``: submitted by the submit command, or by KubeRay for the run declared in the stack."""
    return attempt_of(run_name, submission_id) is not None or bool(
        re.fullmatch(rf"maxtext-{re.escape(run_name)}-rayjob-[0-9a-f]+", submission_id or "")
    )


@dataclass(frozen=True)
class RunJob:
    """One job of a run on the cluster."""

    submission_id: str
    status: str
    started: float = 0.0
    """Ray's start time (ms since the epoch): orders the run's jobs."""
    attempt: Optional[int] = None
    """The submit command's attempt number; None for a declared run's job."""


@dataclass(frozen=True)
class Next:
    """What the submit command does for a run, given the run's jobs."""

    action: Literal["submit", "follow", "report"]
    submission_id: str
    attempt: int
    why: str
    """The line the command prints about it (empty for a run's first submission)."""


def _newest(jobs: Sequence[RunJob]) -> RunJob:
    return max(jobs, key=lambda job: (job.started, job.attempt or 0))


def decide(run_name: str, jobs: Sequence[RunJob]) -> Next:
    """Submit, follow or report: ``jobs`` are the run's jobs on the cluster."""
    active = [job for job in jobs if job.status not in TERMINAL]
    if active:
        job = _newest(active)
        return Next("follow", job.submission_id, job.attempt or 0,
                    f"{job.submission_id} is {job.status}; following it instead of submitting a second job of this run")
    if not jobs:
        return Next("submit", submission_id_for(run_name), 1, "")
    last = _newest(jobs)
    if last.status == "SUCCEEDED":
        return Next("report", last.submission_id, last.attempt or 0,
                    f"{last.submission_id} already SUCCEEDED; nothing to submit (a new run needs a new run_name)")
    attempt = max(job.attempt or 1 for job in jobs) + 1
    new = submission_id_for(run_name, attempt)
    return Next("submit", new, attempt,
                f"{last.submission_id} {last.status}; submitting attempt {attempt} as {new} "
                "(same run_name: MaxText resumes from the run's latest checkpoint)")


def latest(run_name: str, jobs: Sequence[RunJob]) -> Next:
    """``--follow``: the run's newest job (a running one first), whatever its status; nothing is ever submitted."""
    if not jobs:
        raise ConfigError(
            "--follow", run_name,
            "a run with a job on this Ray cluster (a run declared in the stack starts at `pulumi up`: "
            "`kubectl get rayjobs` shows it)",
        )
    active = [job for job in jobs if job.status not in TERMINAL]
    job = _newest(active or jobs)
    return Next("follow" if active else "report", job.submission_id, job.attempt or 0,
                f"{job.submission_id} is {job.status}")


def run_until_ctrl_c(loop: asyncio.AbstractEventLoop, make: Callable[[], Coroutine]) -> None:
    """Run the coroutine ``make()`` returns on ``loop`` to its end; Ctrl-C cancels it and raises KeyboardInterrupt.

    ``asyncio.Runner.run`` makes the task first and installs its Ctrl-C handler after: a Ctrl-C in between
    raised KeyboardInterrupt with the task still pending, and the loop's close reported that task with a
    traceback (seen under load in tests/test_training_local_job.py). Here the handler is in place before the
    coroutine exists, and a Ctrl-C that comes before the task only marks it: the task is cancelled as soon as it
    is made. A second Ctrl-C raises KeyboardInterrupt at once. A task left unfinished is cancelled, and
    ``JobsApi``'s close runs it to its end.
    """
    task: asyncio.Task | None = None
    interrupted = False

    def on_ctrl_c(signum, frame) -> None:
        nonlocal interrupted
        if interrupted:
            raise KeyboardInterrupt
        interrupted = True
        if task is not None:
            task.cancel()
            loop.call_soon_threadsafe(lambda: None)  # wakes a loop asleep in select()

    handles_ctrl_c = (threading.current_thread() is threading.main_thread()
                      and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if handles_ctrl_c:
        signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        task = loop.create_task(make())
        if interrupted:
            task.cancel()
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        if handles_ctrl_c:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if task is not None:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # read: a KeyboardInterrupt raised inside the task is not "never retrieved"


class JobsApi:
    """The JobSubmissionClient calls of the submit command, retried, each failure one ClusterError.

    A context manager: the event loop that streams logs is built on entry, before
    anything is submitted. Ctrl-C can arrive at any moment after the submission;
    building a loop inside that window could leave a half-built loop whose
    finaliser prints a traceback.
    """

    def __init__(self, client, log: Callable[[str], None], backoff: retry.Backoff | None = None):
        self.client = client
        self.log = log
        self.backoff = backoff
        self._runner: asyncio.Runner | None = None

    def __enter__(self) -> "JobsApi":
        self._runner = asyncio.Runner()
        self._runner.get_loop()
        return self

    def __exit__(self, *exc) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def _call(self, what: str, fn):
        try:
            return retry.call(fn, what, self.log, self.backoff)
        except ClusterError:
            raise
        except Exception as e:  # noqa: BLE001 - requests, aiohttp and Ray raise different types
            status = refusal_status(e)
            if status is not None:
                # The token was accepted when the client connected (its version check needs it too).
                raise ClusterError(
                    f"{what}: the Ray cluster now refuses the submit command's token (HTTP {status}): the RayCluster "
                    "may have been recreated with a new one"
                ) from None
            raise ClusterError(f"{what}: {retry.reason(e)}") from None

    def status(self, sid: str) -> str | None:
        """The job's status, or None if there is no such job."""
        def get():
            try:
                return str(self.client.get_job_status(sid).value)
            except RuntimeError as e:
                if "does not exist" in str(e) or "status code 404" in str(e):
                    return None
                raise
        return self._call(f"reading the status of {sid}", get)

    def run_jobs(self, run_name: str) -> list[RunJob]:
        """Every job of ``run_name`` on the cluster."""
        jobs = self._call("listing the cluster's jobs", self.client.list_jobs)
        return [
            RunJob(
                submission_id=job.submission_id,
                status=str(getattr(job.status, "value", job.status)),
                started=float(getattr(job, "start_time", None) or 0),
                attempt=attempt_of(run_name, job.submission_id),
            )
            for job in jobs
            if is_job_of(run_name, job.submission_id)
        ]

    def submit(self, sid: str, entrypoint: str, runtime_env: dict, metadata: dict) -> bool:
        """Submit the job; False if a job with that id exists already (a concurrent or retried submit)."""
        def post():
            try:
                self.client.submit_job(
                    entrypoint=entrypoint, submission_id=sid, runtime_env=runtime_env, metadata=metadata
                )
                return True
            except RuntimeError as e:
                if "already exists" in str(e):
                    return False
                raise
        return self._call(f"submitting {sid}", post)

    def stop(self, sid: str) -> None:
        self._call(f"stopping {sid}", lambda: self.client.stop_job(sid))

    def logs(self, sid: str) -> str:
        return self._call(f"reading the log of {sid}", lambda: self.client.get_job_logs(sid))

    def entrypoint(self, sid: str) -> str:
        return self._call(f"reading {sid}", lambda: self.client.get_job_info(sid).entrypoint) or ""

    def timing(self, sid: str) -> tuple[str, float, float | None]:
        """The job's status, when it was submitted and when it ended (None while it runs; epoch seconds), as Ray
        records them."""
        info = self._call(f"reading {sid}", lambda: self.client.get_job_info(sid))
        status = str(getattr(info.status, "value", info.status))
        return status, info.start_time / 1000, (info.end_time / 1000 if info.end_time else None)

    def message(self, sid: str) -> str:
        """Ray's message about the job (why it failed, when the log has nothing)."""
        return self._call(f"reading {sid}", lambda: self.client.get_job_info(sid).message) or ""

    def follow(self, sid: str, on_text: Callable[[str], None]) -> None:
        """Stream the job's log until it ends, reconnecting on transient errors.

        A new stream replays the log from its start; ``on_text`` gets each part once.
        """
        seen = 0

        async def tail():
            nonlocal seen
            position = 0
            async for chunk in self.client.tail_job_logs(sid):
                new = chunk[max(0, seen - position):]
                position += len(chunk)
                if new:
                    seen += len(new)
                    on_text(new)

        def stream():
            if self._runner is None:
                raise RuntimeError("JobsApi.follow needs `with JobsApi(...) as api:`")
            run_until_ctrl_c(self._runner.get_loop(), tail)

        try:
            self._call(f"following the log of {sid}", stream)
        except ClusterError as e:
            raise ClusterError(f"{e}; the job keeps running: run the same command again to follow it") from None

    def wait_terminal(self, sid: str, timeout_s: float) -> str:
        """The job's status once it is terminal (or whatever it is after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        status = self.status(sid)
        while status not in TERMINAL and time.monotonic() < deadline:
            time.sleep(1)
            status = self.status(sid)
        return str(status)
