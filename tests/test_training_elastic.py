"""Kill the worker of rank 0 of one local elastic job twice: each time Ray Train restarts the worker group and
MaxText resumes from the run's latest complete checkpoint, and the job finishes the requested steps.

The real thing on CPU, on the path cluster runs write to: a local Ray head (this module's), the local elastic job
(2 CPU workers, num_workers=(1, 2), FailureConfig(max_failures=3)) submitted with ``python -m
gke_ray_tpu.training.submit --local --elastic``, with ``base_output_directory`` ``gs://<bucket>/`` served by a Cloud
Storage emulator on 127.0.0.1 (``tests/gcs_emulator.py``). ``tests/drill.py`` SIGKILLs rank 0, the worker that hosts
the JAX coordinator and writes each checkpoint's commit marker:

1. between saves: once step 4's commit marker is in the bucket, before its writer hears back and so before the
   save of step 8 begins (the emulator pauses the answer); the next group restores step 4 (the ``drill`` tests);
2. mid-save, in the group the first kill left: the emulator holds the upload of step 12's commit marker, the last
   object Orbax writes for a step on ``gs://``; when it comes in, every array and metadata file of step 12 is
   written, and the drill kills its writer. The next group must restore step 8, never the torn 12 (the ``torn``
   tests).

One job for both: a head, a job and a cold first worker group fewer than a job per kill.
"""

from __future__ import annotations

import re

import pytest

from tests.drill import (
    AFTER_COMMIT, HELD_COMMIT, jax_compile_seconds, kept_step_seconds, kill_workers, maxtext_step_seconds,
)
from tests.gcs_emulator import GcsEmulator
from tests.test_training_local_job import reported_losses
from gke_ray_tpu.training.driver.local_ray import LocalRayHead

STEPS = 16
PERIOD = 4
HELD = 12
"""The step whose commit marker the emulator holds: a save of the second group, which restored step PERIOD."""
RUN = "pytest-kill-drill"
BUCKET = "drill-checkpoints"
MOMENTS = (AFTER_COMMIT, HELD_COMMIT)


@pytest.fixture(scope="module")
def drills(tmp_path_factory):
    """One Drill per kill. The tests read the run's event files from the bucket, so the emulator stays up and this
    process's clients point at it until the module ends."""
    out = tmp_path_factory.mktemp("drill")
    with GcsEmulator(BUCKET, out / "fake-gcs-server.log", hold_commit_of=HELD, pause_after_commit_of=PERIOD) as gcs, \
            gcs.clients_here():
        # JAX_LOG_COMPILES: the workers log JAX's own timing of each compilation, which the goodput is checked against.
        with LocalRayHead(num_cpus=2, log_path=out / "ray-head.log", env={**gcs.env, "JAX_LOG_COMPILES": "1"}) as head:
            found = kill_workers(head, out, RUN, steps=STEPS, checkpoint_period=PERIOD, moments=MOMENTS, rank=0,
                                 timeout_s=720, storage=gcs)
        yield found


@pytest.fixture(scope="module")
def drill(drills):
    """The kill between saves."""
    return drills[0]


@pytest.fixture(scope="module")
def torn(drills):
    """The kill of the writer of step HELD's save."""
    return drills[1]


def test_the_job_succeeds_with_all_the_steps(drill):
    assert (drill.returncode, drill.status) == (0, "SUCCEEDED"), drill.stderr
    assert sorted(drill.progress.steps) == list(range(STEPS))  # MaxText counts from 0: the last is 15
    assert drill.checkpoints_at_end == [0, 4, 8, 12, 15]


def test_ray_train_restarted_the_group_with_new_worker_processes(drill):
    groups = drill.progress.groups
    assert len(groups) == len(MOMENTS) + 1  # one restart per kill, no other
    killed, resumed = drill.killed_group, drill.resumed_group
    assert killed.ranks[drill.killed_pid] == 0 and killed.workers == 2
    assert not set(killed.ranks) & set(resumed.ranks)
    assert 1 <= resumed.workers <= 2 and sorted(resumed.ranks.values()) == list(range(resumed.workers))
    # The elastic scaling policy chose the size each time, and the failure policy allowed the retry.
    assert drill.log.count("Deciding to start/restart training with this worker group size.") == len(groups)
    assert "[FailurePolicy] RETRY" in drill.log and "Error count: 1 (max allowed: 3)" in drill.log


def test_maxtext_resumed_from_the_latest_checkpoint_losing_at_most_one_period(drill):
    killed, resumed = drill.killed_group, drill.resumed_group
    assert killed.restored_step is None  # the first group started from scratch
    assert drill.checkpoints_at_kill == [0, PERIOD]  # the kill came after step 4's commit and before step 8's save
    assert resumed.restored_step == max(drill.checkpoints_at_kill)
    assert max(killed.steps) >= drill.last_step_seen > resumed.restored_step
    assert 0 < drill.steps_lost <= PERIOD
    # The new group's first step is the one after the checkpoint, and it runs on until the next kill.
    assert sorted(resumed.steps) == list(range(resumed.restored_step + 1, max(resumed.steps) + 1))
    assert max(resumed.steps) >= HELD
    # The steps run twice computed the same losses: the restored state is the saved one.
    rerun = range(resumed.restored_step + 1, max(killed.steps) + 1)
    # (within 1e-2 relative: the resumed group may have another worker count, so reductions can differ)
    assert [resumed.steps[n].loss for n in rerun] == pytest.approx([killed.steps[n].loss for n in rerun], rel=1e-2)
    assert drill.progress.last.loss < drill.progress.first.loss - 1.0


def test_the_submit_command_reported_each_restart(drill):
    for group_number, group in enumerate(drill.progress.groups[1:], start=2):
        restored = group.restored_step
        assert f"[submit] worker group {group_number}: Ray Train restarted training with {group.workers} workers" \
            in drill.stderr
        assert f"[submit] worker group {group_number}: MaxText restored checkpoint {restored} (saved after step " \
               f"{restored + 1}/16); continuing with step {restored + 2}/16" in drill.stderr
    first, last = reported_losses(drill.stderr, "16 steps")
    assert (first, last) == (round(drill.progress.first.loss, 3), round(drill.progress.last.loss, 3))
    assert last < first
    assert f"2 restarts (restored checkpoint {PERIOD}, {HELD - PERIOD})" in drill.stderr


def test_recovery_is_timed_from_the_log(drill):
    r = drill.recovery()
    assert 0 < r["group_started_s"] < r["restored_s"] < r["next_step_s"] < 300, r


def test_the_figure_marks_the_restarts(drill):
    from gke_ray_tpu.training import report

    metrics = report.read_metrics(f"{drill.output_dir}/tensorboard")
    # each resumed group's first step
    assert metrics.restarts == [group.restored_step + 1 for group in drill.progress.groups[1:]]
    assert [step for step, _ in metrics.series(report.LOSS)] == list(range(STEPS))
    assert (drill.run_dir / "report.png").is_file() and "[submit] figure: " in drill.stderr


def test_goodput_counts_the_restarts_as_recovery_and_the_steps_run_again_as_lost_progress(drills, capsys):
    """Each bucket against a record the accounting does not read: the drill's own clock, MaxText's event files
    (one per worker group), JAX's compile log."""
    import json

    from gke_ray_tpu.training import report

    drill = drills[0]
    assert report.main([str(drill.run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["goodput"]
    buckets = result["buckets"]
    assert 0 < result["goodput_pct"] < 100 and result["restarts"] == len(drills)
    # Recovery runs from a killed group's last line to the next group's first step; the drill measured each kill to
    # the log line of that step, which MaxText writes one step later.
    next_step_s = sum(d.recovery()["next_step_s"] for d in drills)
    assert 0 < buckets["recovery"] <= next_step_s + len(drills) and buckets["recovery"] >= 0.8 * next_step_s, (
        buckets, next_step_s)
    # The steps run again, in MaxText's event files: each resumed group's first is the one after the checkpoint it
    # restored, and what the group before it also wrote lies in the steps counted as run again. A file trails its
    # log (tensorboardX writes events from a queue on a thread; MaxText flushes the file once per step), so a
    # SIGKILL can lose its last step or two there.
    files = maxtext_step_seconds(f"{drill.output_dir}/tensorboard")
    assert len(files) == len(drills) + 1, [sorted(f) for f in files]
    restored = [d.resumed_group.restored_step for d in drills]
    twice = []
    for killed, resumed, kept in zip(files, files[1:], restored):
        assert min(resumed) == kept + 1
        both = set(killed) & set(resumed)
        assert both == set(range(kept + 1, kept + 1 + len(both))), (sorted(both), kept)
        twice.append(both)
    assert sorted(files[-1]) == list(range(restored[-1] + 1, STEPS))
    counted = sum(len(both) for both in twice)
    assert counted <= result["rerun_steps"] <= counted + 2 * len(drills), (twice, result["rerun_steps"])
    # They took at least the seconds the killed groups recorded for them (more: each ran on until it died), unless a
    # save of the checkpoint restored blocked them.
    rerun_s = sum(killed[n] for killed, both in zip(files, twice) for n in both)
    assert buckets["lost_progress"] > 0 and buckets["lost_progress"] + buckets["checkpoint_save"] >= rerun_s, (
        buckets, rerun_s)
    # Productive: the kept steps' recorded seconds (each killed group's up to the checkpoint the next restored, then
    # the last group's), less what saves inside the loop blocked.
    kept_s = kept_step_seconds(files, restored)
    assert kept_s - buckets["checkpoint_save"] - 0.02 <= buckets["productive"] <= kept_s + 0.02, (buckets, kept_s)
    # Compilation is the first group's; JAX timed it itself (a restart's is part of the recovery).
    rank0 = {r: p for p, r in drill.killed_group.ranks.items()}[0]
    jax_s, train_step_s = jax_compile_seconds(drill.log, rank0)
    assert train_step_s < buckets["compilation"] and 0.9 * jax_s <= buckets["compilation"] <= jax_s + max(2.0, 0.25 * jax_s), (
        buckets, jax_s)
    assert buckets["checkpoint_restore"] == 0  # the restores after the kills are part of the recovery


def test_the_writer_died_with_its_save_written_but_not_committed(torn):
    assert torn.killed_rank == 0  # jax process 0 writes the commit marker
    written = {name.removeprefix(f"{RUN}/checkpoints/{HELD}/") for name in torn.held_step_objects}
    assert {"_CHECKPOINT_METADATA", "items/_METADATA", "items/manifest.ocdbt"} <= written
    assert "commit_success.txt" not in written
    assert torn.checkpoints_at_kill == list(range(0, HELD, PERIOD))


def test_the_restarted_group_restored_the_previous_complete_step_and_the_job_succeeded(torn):
    assert (torn.returncode, torn.status) == (0, "SUCCEEDED"), torn.stderr
    killed, resumed = torn.killed_group, torn.resumed_group
    assert killed.restored_step == PERIOD and max(killed.steps) >= HELD  # the group the first kill left
    assert resumed.restored_step == HELD - PERIOD  # not the torn step HELD
    assert sorted(resumed.steps) == list(range(HELD - PERIOD + 1, STEPS))
    rerun = range(HELD - PERIOD + 1, HELD + 1)
    assert [resumed.steps[n].loss for n in rerun] == pytest.approx([killed.steps[n].loss for n in rerun], rel=1e-2)
    # Step HELD was saved again, whole, by the new group: every period is there, committed.
    assert torn.checkpoints_at_end == [0, 4, 8, 12, 15]
    assert f"checkpoints: gs://{BUCKET}/{RUN}/checkpoints" in torn.stderr


def test_the_loss_curve_was_read_from_the_bucket(torn):
    assert torn.output_dir == f"gs://{BUCKET}/{RUN}"
    assert (torn.run_dir / "report.png").is_file() and "[submit] figure: " in torn.stderr


# Orbax's own lines (absl INFO, in every worker's log; the job log has them through Ray), the ones a
# goodput count reads: how long a save blocked training, when its background part ended, how long a
# restore took. MaxText's "Waited <s> seconds for step <N> to finish before starting checkpointing."
# marks the start of a save, "restoring from this run's directory step <N>" the start of a restore.
SAVE_BLOCKED = re.compile(
    r"\[process=(\d+)\] \[(async|sync)\] Finished blocking save in ([\d.]+) seconds\. Continuing save @ (\S+)/(\d+)\.")
SAVE_DONE = re.compile(
    r"\[process=(\d+)\] \[(async|sync)\] Finished save(?: \(blocking \+ background\))? in ([\d.]+) seconds @ (\S+)/(\d+)\s*$",
    re.MULTILINE)
RESTORE_DONE = re.compile(
    r"\[process=(\d+)\] \[(async|sync)\] Finished load in ([\d.]+) seconds @ (\S+)/(\d+)\s*$", re.MULTILINE)


def test_save_and_restore_times_are_in_the_job_log(drills):
    drill, torn = drills
    where = f"gs://{BUCKET}/{RUN}/checkpoints"
    blocked = {(m[1], int(m[5])) for m in SAVE_BLOCKED.finditer(torn.log) if m[4] == where}
    assert {("0", step) for step in (0, 4, 8, 12, 15)} <= blocked and ("1", HELD) in blocked
    # Process 0 reports a whole save once it is committed and told so: never the torn first save of step HELD alone,
    # which is the killed group's; step HELD's line is the resumed group's save of it. Step PERIOD's writer died
    # waiting for the answer to its commit (the first kill): committed, and no line.
    done = {}
    for line in torn.log.splitlines():
        if (m := SAVE_DONE.search(line)) and m[1] == "0" and m[4] == where:
            assert float(m[3]) > 0 and int(m[5]) not in done, line
            done[int(m[5])] = line
    assert sorted(done) == [0, 8, 12, 15] and PERIOD in drill.checkpoints_at_kill, sorted(done)
    resumed_rank0 = {r: p for p, r in torn.resumed_group.ranks.items()}[0]
    assert f"pid={resumed_rank0})" in done[HELD], done[HELD]
    # Each restarted group's workers, and only they, restored the checkpoint that group restored.
    restarted = torn.progress.groups[1:]
    restores = {}
    for line in torn.log.splitlines():
        if (m := RESTORE_DONE.search(line)) and m[4] == where:
            pid = next((pid for group in restarted for pid in group.ranks if f"pid={pid})" in line), line)
            restores.setdefault(pid, set()).add((m[1], int(m[5])))
    assert restores == {
        pid: {(str(rank), group.restored_step)} for group in restarted for pid, rank in group.ranks.items()}
