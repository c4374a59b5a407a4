"""Kill a training worker mid-run (SIGKILL by pid): Ray Train restarts the worker group and MaxText
resumes from the run's latest checkpoint, finishing the requested steps.

The real thing on CPU: a local Ray head (this module's), the local elastic job (2 CPU workers,
num_workers=(1, 2), FailureConfig(max_failures=3)) submitted with ``python -m gke_ray_tpu.training.submit
--local --elastic``, and ``tests/drill.py`` killing the worker of rank 0 (the one that hosts the JAX
coordinator) once the checkpoint of step 4 is committed and a later step is logged.
"""

from __future__ import annotations

import pytest

from tests.test_training_local_job import reported_losses
from tests.drill import jax_compile_seconds, kept_step_seconds, kill_a_worker, maxtext_step_seconds
from gke_ray_tpu.training.driver.local_ray import LocalRayHead

STEPS = 16
PERIOD = 4
RUN = "pytest-elastic-kill"


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    out = tmp_path_factory.mktemp("elastic")
    # JAX_LOG_COMPILES: the workers log JAX's own timing of each compilation, which the goodput is checked against.
    with LocalRayHead(num_cpus=2, log_path=out / "ray-head.log", env={"JAX_LOG_COMPILES": "1"}) as head:
        yield kill_a_worker(head, out, RUN, steps=STEPS, checkpoint_period=PERIOD, rank=0)


def test_the_job_succeeds_with_all_the_steps(drill):
    assert (drill.returncode, drill.status) == (0, "SUCCEEDED"), drill.stderr
    assert sorted(drill.progress.steps) == list(range(STEPS))  # MaxText counts from 0: the last is 15
    assert drill.checkpoints_at_end == [0, 4, 8, 12, 15]


def test_ray_train_restarted_the_group_with_new_worker_processes(drill):
    killed, resumed = drill.progress.groups  # exactly one restart
    assert killed.ranks[drill.killed_pid] == 0 and killed.workers == 2
    assert not set(killed.ranks) & set(resumed.ranks)
    assert 1 <= resumed.workers <= 2 and sorted(resumed.ranks.values()) == list(range(resumed.workers))
    # The elastic scaling policy chose the size each time, and the failure policy allowed the retry.
    assert drill.log.count("Deciding to start/restart training with this worker group size.") == 2
    assert "[FailurePolicy] RETRY" in drill.log and "Error count: 1 (max allowed: 3)" in drill.log


def test_maxtext_resumed_from_the_latest_checkpoint_losing_at_most_one_period(drill):
    killed, resumed = drill.progress.groups
    assert killed.restored_step is None  # the first group started from scratch
    assert PERIOD in drill.checkpoints_at_kill
    assert resumed.restored_step == max(drill.checkpoints_at_kill)
    assert max(killed.steps) >= drill.last_step_seen > resumed.restored_step
    assert 0 < drill.steps_lost <= PERIOD
    # The new group's first step is the one after the checkpoint, and it runs to the end.
    assert sorted(resumed.steps) == list(range(resumed.restored_step + 1, STEPS))
    # The steps run twice computed the same losses: the restored state is the saved one.
    rerun = range(resumed.restored_step + 1, max(killed.steps) + 1)
    # (within 1e-2 relative: the resumed group may have another worker count, so reductions can differ)
    assert [resumed.steps[n].loss for n in rerun] == pytest.approx([killed.steps[n].loss for n in rerun], rel=1e-2)
    assert drill.progress.last.loss < drill.progress.first.loss - 1.0


def test_the_submit_command_reported_the_restart(drill):
    restored = drill.resumed_group.restored_step
    assert f"[submit] worker group 2: Ray Train restarted training with {drill.resumed_group.workers} workers" \
        in drill.stderr
    assert f"[submit] worker group 2: MaxText restored checkpoint {restored} (saved after step {restored + 1}/16); " \
           f"continuing with step {restored + 2}/16" in drill.stderr
    first, last = reported_losses(drill.stderr, "16 steps")
    assert (first, last) == (round(drill.progress.first.loss, 3), round(drill.progress.last.loss, 3))
    assert last < first
    assert f"1 restart (restored checkpoint {restored})" in drill.stderr


def test_recovery_is_timed_from_the_log(drill):
    r = drill.recovery()
    assert 0 < r["group_started_s"] < r["restored_s"] < r["next_step_s"] < 300, r


def test_the_figure_marks_the_restart(drill):
    from gke_ray_tpu.training import report

    metrics = report.read_metrics(str(drill.run_dir / "tensorboard"))
    assert metrics.restarts == [drill.resumed_group.restored_step + 1]  # the resumed group's first step
    assert [step for step, _ in metrics.series(report.LOSS)] == list(range(STEPS))
    assert (drill.run_dir / "report.png").is_file() and "[submit] figure: " in drill.stderr


def test_goodput_counts_the_restart_as_recovery_and_the_steps_run_again_as_lost_progress(drill, capsys):
    """Each bucket against a record the accounting does not read: the drill's own clock, MaxText's event files
    (one per worker group), JAX's compile log."""
    import json

    from gke_ray_tpu.training import report

    assert report.main([str(drill.run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["goodput"]
    buckets = result["buckets"]
    assert 0 < result["goodput_pct"] < 100 and result["restarts"] == 1
    # Recovery runs from the killed group's last line to the resumed group's first step; the drill measured the kill
    # to the log line of that step, which MaxText writes one step later.
    next_step_s = drill.recovery()["next_step_s"]
    assert 0 < buckets["recovery"] <= next_step_s + 1 and buckets["recovery"] >= 0.8 * next_step_s, (buckets, next_step_s)
    # The steps run again, in MaxText's event files: the resumed group's first is the one after the restored
    # checkpoint, and what the killed group also wrote lies in the steps counted as run again. Its file trails its
    # log (tensorboardX writes events from a queue on a thread; MaxText flushes the file once per step), so a
    # SIGKILL can lose its last step or two there.
    killed, resumed = maxtext_step_seconds(drill.run_dir / "tensorboard")
    restored = drill.resumed_group.restored_step
    rerun = range(restored + 1, restored + 1 + result["rerun_steps"])
    assert min(resumed) == restored + 1 and sorted(resumed) == list(range(restored + 1, STEPS))
    twice = set(killed) & set(resumed)
    assert twice <= set(rerun) and len(twice) <= len(rerun) <= len(twice) + 2, (sorted(twice), rerun)
    # They took at least the seconds the killed group recorded for them (more: it ran on until it died), unless a
    # save of the checkpoint it restored blocked them.
    rerun_s = sum(killed[n] for n in twice)
    assert buckets["lost_progress"] > 0 and buckets["lost_progress"] + buckets["checkpoint_save"] >= rerun_s, (
        buckets, rerun_s)
    # Productive: the kept steps' recorded seconds (the killed group's up to the restored checkpoint, then the
    # resumed group's), less what saves inside the loop blocked.
    kept_s = kept_step_seconds(killed, resumed, restored)
    assert kept_s - buckets["checkpoint_save"] - 0.02 <= buckets["productive"] <= kept_s + 0.02, (buckets, kept_s)
    # Compilation is the first group's; JAX timed it itself (a restart's is part of the recovery).
    rank0 = {r: p for p, r in drill.killed_group.ranks.items()}[0]
    jax_s, train_step_s = jax_compile_seconds(drill.log, rank0)
    assert train_step_s < buckets["compilation"] and 0.9 * jax_s <= buckets["compilation"] <= jax_s + max(2.0, 0.25 * jax_s), (
        buckets, jax_s)
    assert buckets["checkpoint_restore"] == 0  # the restore after the kill is part of the recovery
