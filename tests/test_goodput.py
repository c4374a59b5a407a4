"""Goodput accounting on synthetic timelines and logs: the buckets, the log reader, the report command."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from gke_ray_tpu.training import goodput, report
from gke_ray_tpu.training.driver import run_files
from gke_ray_tpu.training.driver.run_files import JobRecord
from gke_ray_tpu.training.driver.timeline import read_times
from gke_ray_tpu.training.goodput import BUCKETS, GroupTimes, RunTimes, account

T0 = 1_796_320_000.0
"""Submission, epoch seconds; every other time below is seconds after it."""


def clean_group(at: float = 0.0, restore: tuple | None = None, restored_step: int | None = None,
                steps: range = range(10)) -> GroupTimes:
    """First line at +5, checkpoint lookup at +6, compiled at +10, the loop from +10.5: 1 s steps, except
    that the step after the first carries the first step's 0.5 s checkpoint save; waits 1 s for the last save."""
    first = steps[0]
    seconds = {n: 1.5 if n == first + 1 else 1.0 for n in steps}
    end = T0 + at + 10.5 + sum(seconds.values())
    return GroupTimes(
        first_seen=T0 + at + 5, last_seen=end + 1.0, steps=seconds,
        dispatched=(first, T0 + at + 11.5), restore=restore, restored_step=restored_step,
        compile=(T0 + at + 6.1, T0 + at + 10),
        saves=((T0 + at + 11.5, T0 + at + 12.0), (end, end + 1.0)),
    )


def test_a_clean_run_adds_up_to_its_wall_time():
    run = RunTimes(T0, T0 + 25, (clean_group(),))
    result = account(run, usd_per_hour=36.0)
    assert result.buckets == pytest.approx({
        "productive": 10.0, "startup": 6.6, "compilation": 3.9, "checkpoint_save": 1.5,
        "checkpoint_restore": 0.0, "recovery": 0.0, "lost_progress": 0.0, "other": 3.0,
    })
    assert result.wall_s == 25
    assert result.goodput_pct == pytest.approx(40.0) and result.usd("productive") == pytest.approx(0.1)
    assert (result.restarts, result.rerun_steps) == (0, 0)


def test_a_restart_is_recovery_and_the_steps_after_the_restored_checkpoint_are_lost():
    """The first group logs steps 0-6 and dies 0.4 s after step 6; the second restores checkpoint 4 (steps 5-6
    run again), its restore and compilation counting as recovery.

    By hand, seconds after submission: the killed group's loop starts at 10.5 (step 0 dispatched at 11.5, less
    its 1 s), so its steps end at 11.5, 13, 14, 15, 16 (step 4), 17, 18; it saved in 11.5-12 and its last line is
    18.4. The resumed group's step 5 is dispatched at 41.5, so its loop runs 40.5-46, with saves in 41.5-42 and
    46-47; the job ends at 60.
    """
    killed = clean_group(steps=range(7))
    killed = GroupTimes(**{**killed.__dict__, "last_seen": T0 + 10.5 + 7.5 + 0.4, "saves": killed.saves[:1]})
    resumed = clean_group(at=30, restore=(T0 + 36, T0 + 37), restored_step=4, steps=range(5, 10))
    run = RunTimes(T0, T0 + 60, (killed, resumed))
    result = account(run, usd_per_hour=0.0)
    assert result.buckets == pytest.approx({
        "productive": (16 - 10.5 - 0.5) + (46 - 40.5 - 0.5),  # steps 0-4 and 5-9, less the saves inside them
        "startup": 10.5 - 3.9, "compilation": 10 - 6.1,  # the first group's only: a restart's is recovery
        "checkpoint_save": 0.5 + 0.5 + 1.0, "checkpoint_restore": 0.0,
        "recovery": 40.5 - 18.4,  # the killed group's last line to the resumed group's first step
        "lost_progress": 18.4 - 16,  # after step 4, the checkpoint the resumed group restored
        "other": 60 - 47,
    })
    assert (result.restarts, result.rerun_steps) == (1, 2)
    assert result.usd("recovery") == 0.0


def test_a_resubmitted_attempt_restores_at_the_start():
    run = RunTimes(T0, T0 + 25, (clean_group(restore=(T0 + 6, T0 + 7), restored_step=4, steps=range(5, 10)),))
    result = account(run, usd_per_hour=None)
    assert result.buckets["checkpoint_restore"] == pytest.approx(1.0)
    assert result.usd("productive") is None and result.to_json()["usd"] is None


def test_a_group_that_never_trained_is_start_up_and_its_successor_recovers_from_its_last_line():
    failed = GroupTimes(first_seen=T0 + 5, last_seen=T0 + 8)
    run = RunTimes(T0, T0 + 40, (failed, clean_group(at=10)))
    result = account(run, usd_per_hour=0.0)
    assert result.buckets["startup"] == pytest.approx(8)
    assert result.buckets["recovery"] == pytest.approx(T0 + 20.5 - (T0 + 8))
    assert result.buckets["compilation"] == 0 and result.rerun_steps == 0


def test_nothing_known_is_all_other_and_the_line_and_table_say_so():
    result = account(RunTimes(T0, T0 + 10), usd_per_hour=0.0)
    assert result.buckets["other"] == 10 and result.goodput_pct == 0
    assert result.line() == "goodput 0.0%: 0.0 s of 10.0 s trained; other 10.0 s"
    assert account(RunTimes(T0, T0 + 3600), usd_per_hour=86.4).line().startswith(
        "goodput 0.0%: 0.0 s of 3600.0 s trained ($86.40 of TPU time); ")
    assert "wall time, submission to end" in result.table() and "$0.00/h" in result.table()


# --- the log reader ---------------------------------------------------------------------------


class Workers:
    """Absl lines of Ray workers whose clock runs ``zone`` ahead of UTC, as Ray streams them."""

    def __init__(self, zone: timedelta = timedelta(0)):
        self.zone = zone
        self.lines: list[str] = []

    def group(self, *pids: int) -> None:
        self.lines.append(f"\x1b[36m(TrainController pid=9)\x1b[0m Started training worker group of size {len(pids)}: ")
        self.lines += [f"\x1b[36m(TrainController pid=9)\x1b[0m - (ip=192.0.2.2, pid={pid}) world_rank={rank}, "
                       f"local_rank={rank}, node_rank=0" for rank, pid in enumerate(pids)]

    def at(self, pid: int, after: float, text: str) -> None:
        clock = datetime.fromtimestamp(T0 + after, timezone.utc) + self.zone
        self.lines.append(f"\x1b[36m(RayTrainWorker pid={pid})\x1b[0m I{clock:%m%d %H:%M:%S.%f} 1402 {text}")

    def step(self, pid: int, after: float, n: int, seconds: float) -> None:
        self.at(pid, after, f"metric_logger.py:265] completed step: {n}, seconds: {seconds:.3f}, TFLOP/s/device: 0.000, "
                            f"Tokens/s/device: 300.000, total_weights: 128, loss: {6 - n / 10}, lm_loss: 6.0")

    @property
    def log(self) -> str:
        return "\n".join(self.lines) + "\n"


def restarted_job(zone: timedelta = timedelta(0)) -> Workers:
    """Group 1 (pids 100, 101) trains steps 0-2 and dies; group 2 (200, 201) restores checkpoint 1 and trains 2-3."""
    w = Workers(zone)
    w.group(100, 101)
    w.at(101, 4.0, "distributed.py:211] Connecting to JAX distributed service")
    w.at(100, 5.0, "checkpointing.py:701] checkpoint manager exists so trying to load this run's existing checkpoint")
    w.at(100, 5.1, "checkpointing.py:803] No existing checkpoints found, not restoring checkpoint.")
    w.at(100, 9.0, "max_utils.py:823] [train] Total estimated memory size: 0.0 GB, estimated output size: 0.0 GB")
    w.at(100, 10.0, "checkpointing.py:1310] Waiting for step 0 to finish before checkpoint...")
    w.at(100, 10.5, "event_tracking.py:171] [process=0] [async] Finished blocking save in 0.50 seconds. Continuing")
    for n, seconds, logged in ((0, 1.0, 11.6), (1, 1.5, 12.6), (2, 1.0, 12.7)):
        w.step(100, logged, n, seconds)
        w.step(101, logged + 0.01, n, seconds * 2)  # rank 1's seconds are not the ones read
    w.at(101, 13.5, "client.h:86] Terminating process because the JAX distributed service detected fatal errors.")
    w.group(200, 201)
    w.at(200, 30.0, "checkpointing.py:701] checkpoint manager exists so trying to load this run's existing checkpoint")
    w.at(200, 30.1, "checkpointing.py:705] restoring from this run's directory step 1")
    w.at(200, 31.0, "event_tracking.py:184] [process=0] [sync] Finished load in 0.90 seconds @ /ckpt/1")
    w.at(200, 33.0, "max_utils.py:823] [train] Total estimated memory size: 0.0 GB")
    w.at(200, 35.0, "checkpointing.py:1310] Waiting for step 3 to finish before checkpoint...")
    w.at(200, 35.2, "event_tracking.py:171] [process=0] [sync] Finished blocking save in 0.20 seconds. Continuing")
    thread = "[process=0][thread=TrainingThread(train_fn_with_final_checkpoint_flush)][step=3][wait_until_finished]"
    w.at(200, 35.3, f"checkpoint_manager.py:2085] {thread} Waiting for Save Finalize thread (save_finalize).")
    w.at(200, 35.8, f"checkpoint_manager.py:2097] {thread} Done waiting for Save Finalize thread (save_finalize).")
    w.at(200, 35.4, "checkpoint_manager.py:2085] [process=0][thread=Thread-7 (_run_loop)][step=3][wait_until_finished] "
                    "Waiting for Save Finalize thread (save_finalize) to complete.")  # a background thread: no wait
    w.step(200, 34.9, 2, 1.0)
    w.step(200, 35.9, 3, 1.0)
    w.at(201, 36.0, "checkpoint_manager.py:2211] CheckpointManager Save Finalize is done on all hosts.")
    return w


def flat(spans) -> list[float]:
    return [when for span in spans for when in span]


LAST_STEP_WRITTEN = {3: T0 + 35.91}
"""The event of the last step, written as rank 0 logged it: what tells the workers' time zone."""


def test_the_reader_finds_each_groups_times_in_rank_0s_lines():
    times = read_times(restarted_job().log, T0, T0 + 40, LAST_STEP_WRITTEN)
    killed, resumed = times.groups
    assert (killed.first_seen, killed.last_seen) == pytest.approx((T0 + 4.0, T0 + 13.5))
    assert killed.steps == {0: 1.0, 1: 1.5, 2: 1.0} and killed.dispatched == pytest.approx((0, T0 + 10.0))
    assert killed.compile == pytest.approx((T0 + 5.1, T0 + 9.0)) and killed.restore is None
    assert flat(killed.saves) == pytest.approx([T0 + 10.0, T0 + 10.5])
    assert resumed.restore == pytest.approx((T0 + 30.0, T0 + 31.0)) and resumed.restored_step == 1
    assert resumed.compile == pytest.approx((T0 + 31.0, T0 + 33.0))
    assert flat(resumed.saves) == pytest.approx([T0 + 35.0, T0 + 35.2, T0 + 35.3, T0 + 35.8])
    assert resumed.training_start() == pytest.approx(T0 + 33.0)
    result = account(times, usd_per_hour=0.0)
    assert result.buckets["recovery"] == pytest.approx(33.0 - 13.5) and result.rerun_steps == 1
    # Step 2 ran in both groups: lost is the killed group's time from the end of step 1 (step 0 dispatched at
    # 10.0, then step 1's 1.5 s) to its last line.
    assert result.buckets["lost_progress"] == pytest.approx(13.5 - (10.0 + 1.5))


def test_the_workers_time_zone_is_read_off_the_event_files():
    """Workers two hours ahead of UTC: the last step's event was written when rank 0 logged it."""
    zoned = restarted_job(zone=timedelta(hours=2)).log
    assert read_times(zoned, T0, T0 + 40, LAST_STEP_WRITTEN) == read_times(restarted_job().log, T0, T0 + 40,
                                                                           LAST_STEP_WRITTEN)


def test_a_job_across_new_year_keeps_its_order():
    new_year = datetime(2027, 1, 1, tzinfo=timezone.utc).timestamp()
    w = Workers()
    w.group(100)
    for n, after in enumerate((-2.0, 3.0)):
        w.at(100, new_year - T0 + after, f"x.py:1] line {n}")
    [group] = read_times(w.log, new_year - 10, new_year + 10, wall_times={}).groups
    assert group.last_seen - group.first_seen == pytest.approx(5.0)


# --- the report command -----------------------------------------------------------------------


def write_run(run_dir, log: str, steps: dict[int, float], submitted: float = T0, ended: float = T0 + 40) -> None:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(run_dir / "tensorboard"))
    for n, wall in steps.items():
        writer.add_scalar(report.LOSS, 6 - n / 10, n, walltime=wall)
        writer.add_scalar(report.TOKENS, 300.0, n, walltime=wall)
    writer.close()
    (run_dir / run_files.JOB_LOG).write_text(log)
    JobRecord("maxtext-r", submitted, ended, "SUCCEEDED", str(run_dir / "tensorboard"), chips=32,
              usd_per_chip_hour=2.7, price_note="test").save(run_dir)


def test_report_json_has_the_goodput_and_the_figure(tmp_path, capsys):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    write_run(run_dir, restarted_job().log, {0: T0 + 11.6, 1: T0 + 12.6, 2: T0 + 34.9, 3: T0 + 35.9})
    assert report.main([str(run_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    result = out["goodput"]
    assert set(result["buckets"]) == set(BUCKETS)
    assert result["wall_s"] == 40 and result["buckets"]["recovery"] == pytest.approx(33.0 - 13.5)
    assert 0 < result["goodput_pct"] < 100 and result["usd_per_hour"] == pytest.approx(86.4)
    assert out["figure"] == str(run_dir / run_files.FIGURE)
    from matplotlib.image import imread

    height, width, _ = imread(out["figure"]).shape
    assert (width, height) == (report.FIGURE_INCHES[0] * report.DPI, report.FIGURE_INCHES[1] * report.DPI)
    # For a person: the table, then where the figure is.
    assert report.main([str(run_dir)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("goodput ") and "recovery after restarts" in table and "$86.40/h" in table


def test_a_run_without_events_is_one_error_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert report.main([str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("python -m gke_ray_tpu.training.report: error: no event files under ") and "tensorboard" in err


def test_without_the_job_record_the_figure_is_drawn_and_the_goodput_is_explained(tmp_path, capsys):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    write_run(run_dir, "", {0: T0 + 1})
    (run_dir / run_files.JOB_RECORD).unlink()
    assert report.main([str(run_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["goodput"] is None and "no goodput: no job.json in " in out["no_goodput"]
    assert (run_dir / run_files.FIGURE).is_file()


def test_a_new_jobs_log_keeps_the_earlier_attempts(tmp_path):
    JobRecord("maxtext-r", T0, T0 + 1, "FAILED", "m", 0, 0.0).save(tmp_path)
    (tmp_path / run_files.JOB_LOG).write_text("attempt 1\n")
    with run_files.open_job_log(tmp_path, "maxtext-r") as same:
        same.write("attempt 1, again from the start\n")
    assert (tmp_path / run_files.JOB_LOG).read_text() == "attempt 1, again from the start\n"
    with run_files.open_job_log(tmp_path, "maxtext-r-attempt-2") as new:
        new.write("attempt 2\n")
    assert (tmp_path / "maxtext-r.log").read_text() == "attempt 1, again from the start\n"
    assert (tmp_path / run_files.JOB_LOG).read_text() == "attempt 2\n"


def test_bucket_names_and_labels_agree():
    assert set(goodput.LABELS) == set(BUCKETS) and set(goodput.PRECEDENCE) == set(BUCKETS) - {"other"}


def test_without_events_the_goodput_is_still_known_and_the_figure_is_not_drawn(tmp_path):
    """A job that never reached a step (or a bucket this machine cannot read) still tells where its time went."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / run_files.JOB_LOG).write_text(restarted_job().log)
    JobRecord("maxtext-r", T0, T0 + 40, "FAILED", str(run_dir / "tensorboard"), 0, 0.0).save(run_dir)
    built = report.write_report(run_dir, str(run_dir / "tensorboard"), run_dir / "x.png", "r")
    assert built.figure is None and built.no_figure.startswith("no event files under ")
    assert built.goodput is not None and built.goodput.buckets["recovery"] == pytest.approx(33.0 - 13.5)
    assert not (run_dir / "x.png").exists()
