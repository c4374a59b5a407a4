"""Lose the worker that writes a checkpoint in the middle of the save: the restarted group restores the
previous complete step, never the torn one, and the job succeeds.

The real thing on CPU, on the path cluster runs write to: the local elastic job (``python -m
gke_ray_tpu.training.submit --local --elastic``, 2 CPU workers on a local Ray head) with ``base_output_directory``
``gs://<bucket>/`` served by a Cloud Storage emulator on 127.0.0.1 (``tests/gcs_emulator.py``). The
emulator holds the upload of step 8's commit marker, the last object Orbax writes for a step on
``gs://``: when it comes in, every array and metadata file of step 8 is written, and the drill
SIGKILLs rank 0, the process writing it (``tests/drill.py``).
"""

from __future__ import annotations

import re

import pytest

from tests.drill import kill_a_worker
from tests.gcs_emulator import GcsEmulator
from gke_ray_tpu.training.driver.local_ray import LocalRayHead

STEPS = 16
PERIOD = 4
HELD = 8
RUN = "pytest-torn-save"
BUCKET = "drill-checkpoints"


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    out = tmp_path_factory.mktemp("torn")
    with GcsEmulator(BUCKET, out / "fake-gcs-server.log", hold_commit_of=HELD) as gcs, \
            LocalRayHead(num_cpus=2, log_path=out / "ray-head.log", env=gcs.env) as head:
        yield kill_a_worker(head, out, RUN, steps=STEPS, checkpoint_period=PERIOD, rank=0, storage=gcs)


def test_the_writer_died_with_its_save_written_but_not_committed(drill):
    assert drill.killed_rank == 0  # jax process 0 writes the commit marker
    written = {name.removeprefix(f"{RUN}/checkpoints/{HELD}/") for name in drill.held_step_objects}
    assert {"_CHECKPOINT_METADATA", "items/_METADATA", "items/manifest.ocdbt"} <= written
    assert "commit_success.txt" not in written
    assert drill.checkpoints_at_kill == [0, PERIOD]


def test_the_restarted_group_restored_the_previous_complete_step_and_the_job_succeeded(drill):
    assert (drill.returncode, drill.status) == (0, "SUCCEEDED"), drill.stderr
    killed, resumed = drill.progress.groups  # exactly one restart
    assert killed.restored_step is None and max(killed.steps) >= HELD
    assert resumed.restored_step == PERIOD  # not the torn step 8
    assert sorted(resumed.steps) == list(range(PERIOD + 1, STEPS))
    rerun = range(PERIOD + 1, HELD + 1)
    assert [resumed.steps[n].loss for n in rerun] == pytest.approx([killed.steps[n].loss for n in rerun], rel=1e-2)
    # Step 8 was saved again, whole, by the new group: every period is there, committed.
    assert drill.checkpoints_at_end == [0, 4, 8, 12, 15]
    assert f"1 restart (restored checkpoint {PERIOD})" in drill.stderr
    assert f"checkpoints: gs://{BUCKET}/{RUN}/checkpoints" in drill.stderr


def test_the_loss_curve_was_read_from_the_bucket(drill):
    assert drill.output_dir == f"gs://{BUCKET}/{RUN}"
    assert (drill.run_dir / "report.png").is_file() and "[submit] figure: " in drill.stderr


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


def test_save_and_restore_times_are_in_the_job_log(drill):
    where = f"gs://{BUCKET}/{RUN}/checkpoints"
    blocked = {(m[1], int(m[5])) for m in SAVE_BLOCKED.finditer(drill.log) if m[4] == where}
    assert {("0", step) for step in (0, 4, 8, 12, 15)} <= blocked and ("1", 8) in blocked
    # Process 0 reports a whole save once it is committed: never the torn first save of step 8 alone,
    # which is the killed group's; step 8's line is the resumed group's save of it.
    done = [(int(m[5]), float(m[3])) for m in SAVE_DONE.finditer(drill.log) if m[1] == "0" and m[4] == where]
    assert sorted(step for step, _ in done) == [0, 4, 8, 12, 15] and all(s > 0 for _, s in done)
    resumed_pids = {str(pid) for pid in drill.resumed_group.ranks}
    restores = [(m[1], int(m[5])) for m in RESTORE_DONE.finditer(drill.log) if m[4] == where]
    assert restores and set(restores) == {(str(rank), PERIOD) for rank in range(drill.resumed_group.workers)}
    lines = [line for line in drill.log.splitlines() if RESTORE_DONE.search(line)]
    assert all(any(f"pid={pid})" in line for pid in resumed_pids) for line in lines)
