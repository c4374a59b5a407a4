"""Fault drill: SIGKILL training workers of a running local elastic job, watch it recover.

``kill_workers`` runs ``python -m gke_ray_tpu.training.submit --local --elastic`` against a
Ray head (the same command a user runs) and kills one worker per moment it is given, each in
the worker group the previous kill left (Ray's state API: an alive RayTrainWorker actor of one
rank), then waits for the job to end. The moments:

- ``MID_PERIOD``: once the latest committed checkpoint ``c`` is at least ``checkpoint_period``
  and the group's last logged step is in ``(c, c + checkpoint_period - 1)``. (The log trails the
  computation by a step, and after the window the save of the next checkpoint, asynchronous as
  MaxText's default is, may be in flight: a kill there may lose more than a period.)
- ``AFTER_COMMIT`` and ``HELD_COMMIT``: with ``storage`` (``tests/gcs_emulator.py``, the run writing
  to ``gs://<bucket>/`` as cluster runs do), once the commit marker of the step the emulator pauses
  after is in the bucket and its writer waits for the answer (a checkpoint just committed, the next
  save not begun: on the emulator a save outlasts a period's steps, so the log's window above closes
  as it opens), or when the save of the step whose marker it holds has written everything but it.

What happened is read back from the job's log (``gke_ray_tpu.training.driver.progress``) and the
checkpoint directory, one :class:`Drill` per kill. ``tests/test_training_elastic.py`` asserts
on it; ``bench/bench_elastic_recovery.py`` times it.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from gke_ray_tpu.core.job_spec import bucket_url, submission_id_for
from gke_ray_tpu.training.driver.local_ray import LocalRayHead, LocalRayNode
from gke_ray_tpu.training.driver.progress import WORKER_PID, Progress
from gke_ray_tpu.training.driver.timeline import ABSL_TIME
from tests.conftest import REPO_ROOT
_XLA_COMPILE = re.compile(r"Finished XLA compilation of \S+ in ([0-9.]+) sec")
_JAX_TIMED = re.compile(r"Finished (?:tracing \S+ for jit|jaxpr to MLIR module conversion \S+|XLA compilation of \S+) in ([0-9.]+) sec")
"""JAX's own timing of each stage of a jit (logged with ``JAX_LOG_COMPILES=1``): tracing, lowering, XLA compilation."""
_TRAIN_STEP_COMPILED = "Finished XLA compilation of jit(train_step) "
STEP_TIME = "perf/step_time_seconds"
"""MaxText's own seconds of each step in its event files (what its ``completed step: N, seconds: S`` line prints)."""
_CHECKPOINT_LOOKED_UP = ("restoring from this run's directory step", "No existing checkpoints found")
PACED_MODEL = ("max_target_length=512", "per_device_batch_size=4", "base_emb_dim=256", "base_mlp_dim=1024")
"""The tiny preset widened until a step takes ~0.3 s on 2 cores: with the compilation cache the tiny
model trains 16 steps in ~2 s, faster than the kill window (a few steps) can be seen through the log."""
_COMPILED = "Total estimated memory size"
"""MaxText's line after it compiled the train step (it reports the compiled program's memory)."""
MID_PERIOD = "mid-period"
AFTER_COMMIT = "after a commit"
HELD_COMMIT = "held commit"
"""When ``kill_workers`` kills (the module's docstring)."""


@dataclass
class Drill:
    returncode: int
    stderr: str
    """What the submit command printed (its progress lines)."""
    status: str
    log: str
    progress: Progress
    killed_pid: int
    """The worker's pid, or the pid of the lost node's ``ray start``."""
    killed_rank: int | None
    """None when a node was lost."""
    killed_at: float
    """time.time() of the SIGKILL."""
    last_step_seen: int
    """The last step in the log when the kill was sent."""
    checkpoints_at_kill: list[int]
    """Committed checkpoint steps of the killed group (listed 1 s after the kill)."""
    checkpoints_at_end: list[int]
    wall_s: float
    run_dir: Path
    """This machine's directory of the run: the job log and the loss curve (and, written locally, its checkpoints
    and MaxText's event files)."""
    output_dir: str
    """Where MaxText wrote the run: ``run_dir``, or ``gs://<bucket>/<run>`` with ``storage``."""
    held_step_objects: list[str] = field(default_factory=list)
    """With a held commit: the objects of that step's save when its writer was killed."""
    back_at: float | None = None
    """With a lost slice that comes back (``tests/fake_tpu.py``): time.time() when the one-slice group's held
    checkpoint was seen committed, after which the slice's hosts were started again."""
    kill_index: int = 0
    """Which of the run's kills this is (0: the first); the job's log, progress and outcome are the whole run's."""

    @property
    def killed_group(self):
        return self.progress.groups[self.kill_index]

    @property
    def resumed_group(self):
        """The group that took over from the killed one."""
        return self.progress.groups[self.kill_index + 1]

    @property
    def steps_lost(self) -> int:
        """Steps the killed group completed after the checkpoint that was restored: run twice."""
        return max(self.killed_group.steps) - self.resumed_group.restored_step

    def group_times(self, group) -> list[tuple[float, str]]:
        """(epoch seconds, line) of the absl-timestamped lines of ``group``'s workers."""
        year = time.localtime(self.killed_at).tm_year
        out = []
        for line in self.log.splitlines():
            pid, stamp = WORKER_PID.search(line), ABSL_TIME.search(line)
            if pid and stamp and int(pid.group(1)) in group.ranks:
                when = datetime.strptime(f"{year}{stamp.group(1)}", "%Y%m%d %H:%M:%S.%f").timestamp()
                out.append((when, line))
        return out

    def recovery(self, group=None, since: float | None = None) -> dict[str, float]:
        """Seconds from ``since`` (the kill) to: ``group``'s (the resumed group's) first log line, MaxText's
        restore, its first step."""
        times = self.group_times(group or self.resumed_group)
        since = self.killed_at if since is None else since
        first = lambda text: next(t for t, line in times if text in line) - since  # noqa: E731
        return {
            "group_started_s": times[0][0] - since,
            "restored_s": first("restoring from this run's directory step"),
            "next_step_s": first("completed step:"),
        }

    def phases(self, group) -> dict[str, float]:
        """What rank 0 of ``group`` spent, in seconds: starting (imports, config, mesh, checkpoint
        lookup or restore), compiling (tracing, lowering and XLA compilation of the train step, up to
        MaxText's compiled-memory line) and ``xla_s``, JAX's own XLA compilation time (summed from
        its ``Finished XLA compilation`` lines, logged when ``JAX_LOG_COMPILES=1``)."""
        rank0 = {r: p for p, r in group.ranks.items()}[0]
        times = [(t, line) for t, line in self.group_times(group) if f"pid={rank0})" in line]
        first = lambda *texts: next(t for t, line in times if any(x in line for x in texts))  # noqa: E731
        looked_up, compiled = first(*_CHECKPOINT_LOOKED_UP), first(_COMPILED)
        xla = sum(float(m.group(1)) for _, line in times if (m := _XLA_COMPILE.search(line)))
        return {"starting_s": looked_up - times[0][0], "compiling_s": compiled - looked_up, "xla_s": xla}

    def median_step_s(self) -> float:
        """Median of MaxText's own per-step seconds over the run's steps."""
        return statistics.median(m.seconds for m in self.progress.steps.values())


def jax_compile_seconds(log: str, pid: int) -> tuple[float, float]:
    """JAX's own seconds in worker ``pid``'s lines (``JAX_LOG_COMPILES=1``), from MaxText's checkpoint lookup
    to the train step's XLA compilation: every stage JAX timed there (tracing, lowering, XLA compilation of each
    jit), and the train step's XLA compilation alone."""
    total, looked_up = 0.0, False
    for line in log.splitlines():
        if f"pid={pid})" not in line:
            continue
        if any(text in line for text in _CHECKPOINT_LOOKED_UP):
            looked_up = True
        elif looked_up and (m := _JAX_TIMED.search(line)):
            total += float(m.group(1))
            if _TRAIN_STEP_COMPILED in line:
                return total, float(m.group(1))
    raise AssertionError(f"no XLA compilation of the train step in worker {pid}'s lines (JAX_LOG_COMPILES unset?)")


def kept_step_seconds(groups: list[dict[int, float]], restored: list[int]) -> float:
    """MaxText's step seconds of the steps a killed run kept: each killed group's up to the checkpoint the next
    group restored (``restored[k]`` for ``groups[k]``), then all of the last group's (the productive bucket, less
    saves inside the loop)."""
    return sum(s for group, kept in zip(groups, restored) for n, s in group.items() if n <= kept) + sum(
        groups[-1].values())


def maxtext_step_seconds(tensorboard_dir: Path | str) -> list[dict[int, float]]:
    """MaxText's own ``perf/step_time_seconds`` per step, one map per event file (one per worker group that
    wrote any), in the order they were written."""
    import fsspec
    from tensorboardX.proto import event_pb2

    from gke_ray_tpu.training.report import _records

    fs, root = fsspec.core.url_to_fs(str(tensorboard_dir))
    out = []
    for path in sorted(fs.glob(f"{root.rstrip('/')}/**/events.out.tfevents.*")):
        seconds = {}
        for body in _records(fs.cat_file(path)):
            event = event_pb2.Event.FromString(body)
            # tensorboardX's add_scalar, which MaxText writes with, stores a simple_value
            seconds.update({int(event.step): value.simple_value for value in event.summary.value
                            if value.tag == STEP_TIME})
        if seconds:
            out.append(seconds)
    return out


def committed_checkpoints(directory: Path) -> list[int]:
    """Orbax's committed steps (a save in progress is a ``<step>.orbax-checkpoint-tmp`` directory)."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def alive_train_worker_pids(head: LocalRayHead) -> set[int]:
    actors = head.state("actors", filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")], timeout=30)
    return {a.pid for a in actors}


def kill_a_worker(head: LocalRayHead, out_dir: Path, run_name: str, steps: int, checkpoint_period: int,
                  rank: int | None = 0, node: LocalRayNode | None = None, timeout_s: float = 480,
                  storage=None) -> Drill:
    """One kill: at the held commit when ``storage`` holds one, else mid-period (``kill_workers``)."""
    moment = HELD_COMMIT if storage is not None and storage.hold_commit_of is not None else MID_PERIOD
    return kill_workers(head, out_dir, run_name, steps, checkpoint_period, (moment,), rank=rank, node=node,
                        timeout_s=timeout_s, storage=storage)[0]


def kill_workers(head: LocalRayHead, out_dir: Path, run_name: str, steps: int, checkpoint_period: int,
                 moments: tuple[str, ...], rank: int | None = 0, node: LocalRayNode | None = None,
                 timeout_s: float = 480, storage=None) -> list[Drill]:
    """Kill the worker of ``rank`` (or ``node``, once) at each of ``moments`` in turn, each in the group the kill
    before it left; one Drill per kill. ``storage``: a ``tests.gcs_emulator.GcsEmulator`` the run writes to (the
    head must have its ``env``); ``AFTER_COMMIT`` and ``HELD_COMMIT`` need it to pause after, or hold, a step's
    commit marker."""
    client = head.jobs()
    sid = submission_id_for(run_name)
    err_path = out_dir / f"{run_name}.submit.err"
    written, env = [], {**os.environ, **head.address_env}
    if storage is not None:
        written, env = [f"base_output_directory={bucket_url(storage.bucket)}/"], {**env, **storage.env}
        output_dir = f"{bucket_url(storage.bucket)}/{run_name}"
        committed = lambda: storage.committed_steps(f"{run_name}/checkpoints")  # noqa: E731
    else:
        output_dir = str(out_dir / run_name)
        committed = lambda: committed_checkpoints(out_dir / run_name / "checkpoints")  # noqa: E731
    held = storage.hold_commit_of if storage is not None else None
    paused = storage.pause_after_commit_of if storage is not None else None
    for moment, step in ((HELD_COMMIT, held), (AFTER_COMMIT, paused)):
        if moment in moments and step is None:
            raise ValueError(f"moments {moments}: {moment!r} needs a storage that holds or pauses after a commit")
    # Only the log's window needs steps slow enough to be seen; at a storage's moment the saves set the pace (MaxText
    # starts a save only once the one before it is committed), and the tiny model costs a fraction of the CPU.
    paced = PACED_MODEL if MID_PERIOD in moments else ()
    started = time.monotonic()
    deadline = started + timeout_s
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gke_ray_tpu.training.submit", "--local", "--elastic", "--address", head.address,
             "--output-dir", str(out_dir), f"steps={steps}", f"checkpoint_period={checkpoint_period}",
             *paced, *written, f"run_name={run_name}"],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env,
        )
    kills = []
    try:
        for index, moment in enumerate(moments):
            # A storage's moment is its event: once the group's worker is known, no log is read until it comes.
            event = {HELD_COMMIT: storage.held, AFTER_COMMIT: storage.paused}.get(moment) if storage is not None else None
            pid = None
            while True:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(f"kill {index + 1} ({moment}): no kill window reached: {err_path.read_text()}")
                if event is not None and pid is not None:
                    if event.wait(timeout=0.2):  # its writer waits: the log as it is at the kill, then the kill
                        group = _progress(client, sid).groups[index]
                        break
                    continue
                time.sleep(0.2 if pid is not None else 1.0)  # the whole log is read each time: often only in a window
                progress = _progress(client, sid)
                if len(progress.groups) <= index or not progress.groups[index].steps:
                    continue
                group = progress.groups[index]
                if pid is None:  # the group is up: look its worker up once, off the kill's critical path
                    if node is not None:
                        pid, rank = node.proc.pid, None
                    else:
                        pid = {r: p for p, r in group.ranks.items()}[rank]
                        alive = alive_train_worker_pids(head)
                        assert pid in alive, (pid, alive)
                    continue
                saved = [c for c in committed() if c >= checkpoint_period]
                if saved and max(saved) < max(group.steps) < max(saved) + checkpoint_period - 1:
                    break
            if node is not None:
                node.kill()
            else:
                os.kill(pid, signal.SIGKILL)
            killed_at, last_seen = time.time(), max(group.steps)
            held_objects = []
            if moment == HELD_COMMIT:
                held_objects = storage.objects(f"{run_name}/checkpoints/{held}/")
                storage.release()  # the dead writer's upload is dropped; the next save of the step passes
            elif moment == AFTER_COMMIT:
                storage.resume()
            time.sleep(1)
            kills.append(dict(kill_index=index, killed_pid=pid, killed_rank=rank, killed_at=killed_at,
                              last_step_seen=last_seen, checkpoints_at_kill=committed(), held_step_objects=held_objects))
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # the submit command stops the job on Ctrl-C
            proc.wait(timeout=120)
    log = client.get_job_logs(sid)
    final = Progress()
    final.feed(log)
    final.flush()
    run = dict(returncode=proc.returncode, stderr=err_path.read_text(), status=str(client.get_job_status(sid).value),
               log=log, progress=final, checkpoints_at_end=committed(), wall_s=time.monotonic() - started,
               run_dir=out_dir / run_name, output_dir=output_dir)
    return [Drill(**run, **kill) for kill in kills]


def _progress(client, sid: str) -> Progress:
    progress = Progress()
    try:
        progress.feed(client.get_job_logs(sid))
    except RuntimeError:  # not submitted yet
        return progress
    progress.flush()
    return progress
