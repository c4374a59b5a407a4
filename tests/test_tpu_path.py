"""The trainer's TPU branch on a fake-TPU Ray cluster (``tests/fake_tpu.py``): Ray Train's own slice
reservation, worker placement, multislice settings and elastic recovery, with the stack's configuration.

The dev stack with 2-host slices (v5p-16), run offline, gives the slices, the TPU pods' environment and the
outputs the submit command reads; every job is the one ``for_cluster`` builds from them (the ScalingConfig
``use_tpu=True, topology, accelerator_type, resources_per_worker={"TPU": 4}, placement_strategy="SPREAD"``),
with only the stand-ins ``tests/fake_tpu.py`` names. In order, on one cluster:

1. a job of 2 slices submitted before any TPU host exists (a scale-to-zero stack's cold start): the slices
   come up afterwards and Ray Train places one worker per host, each slice on its own slice's hosts, with
   the multislice settings MaxText needs;
2. an elastic job (1..2 slices) that loses every host of one slice mid-run: it goes on with the other with
   1-slice settings from its checkpoint, and the goodput accounting shows the recovery; then the lost slice's
   hosts come back (on GKE: Ray's autoscaler raised the run's cluster and Kueue admitted the larger size,
   tests/test_training_submit_queue.py), Ray Train's elastic policy takes them and the run goes on, on both,
   from the one slice's checkpoint. (A job started while only one slice is up gets its size from the same
   decision as this restart: Ray Train's ``ElasticScalingPolicy.make_decision_for_non_running_worker_group``.)
3. a job of 2 slices when only one is left: it fails once the wait for slices ends, saying why.

Slow: a cluster of 5 Ray nodes, two MaxText runs on up to 4 CPU processes (one losing a slice and taking it
back) and a job that waits.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest

from gke_ray_tpu.core import parallelism
from gke_ray_tpu.core.job_spec import COLD_START_TIMEOUT_S
from gke_ray_tpu.training.driver.timeline import ABSL_TIME
from tests.fake_tpu import (
    TEST_STACK, FakeTpuCluster, elastic_job, hosts_by_group, lose_a_slice, read_job, submission, submit, tpu_stack, wait_for_end,
)
from tests.fake_tpu_job.__main__ import SLICE_WAIT_ENV
from tests.fake_tpu_job.hold import HOLD_LINE

ELASTIC_STEPS = 16
PERIOD = 4
LOST = "slice-b"
"""The slice the elastic run loses (and takes back)."""
JOB_TIMEOUT_S = 900
"""A bound on each job, not an expectation."""
SHORT_WAIT_S = 5
"""The never-coming slice's wait: the worker-group start timeout and the trainer's SLICE_WAIT_S (both 900 s
on a scale-to-zero stack) cut to this, so two waits fail the run."""
START_BOUND_S = 300
"""A bound on starting a job's driver and Ray Train's controller on a loaded 2-core machine."""


@pytest.fixture(scope="module")
def stack():
    return tpu_stack(**TEST_STACK)


@pytest.fixture(scope="module")
def cold_stack():
    """The same stack, scaling its slices to zero: its jobs wait COLD_START_TIMEOUT_S for them."""
    return tpu_stack(**TEST_STACK, scaleToZero="true")


@pytest.fixture(scope="module")
def cluster(stack, tmp_path_factory):
    with FakeTpuCluster(stack, tmp_path_factory.mktemp("fake-tpu")) as c:
        yield c


@pytest.fixture(scope="module")
def late_slices(cluster, cold_stack, tmp_path_factory):
    """A static 2-slice job submitted to a cluster with no TPU host; then the slices' hosts are started."""
    out = tmp_path_factory.mktemp("late")
    job = submission(cold_stack, out, "fake-tpu-late", overrides={"steps": 3})
    sid = submit(cluster.head, job)
    for name in cluster.slice_names():
        cluster.start_slice(name)
    status = wait_for_end(cluster.head, sid, JOB_TIMEOUT_S)
    log, progress = read_job(cluster.head, sid)
    return job, status, log, progress


@pytest.fixture(scope="module")
def slice_lost_and_back(late_slices, cluster, stack, tmp_path_factory):
    """The elastic run that loses slice-b's hosts, goes on with slice-a and holds after its next checkpoint until
    slice-b's hosts, started again, are taken (``tests/fake_tpu_job/hold.py``: the one-slice group can neither end
    before the slice comes nor go on for hundreds of steps while Ray Train looks for it)."""
    out = tmp_path_factory.mktemp("elastic")
    job = elastic_job(stack, out, "fake-tpu-elastic", ELASTIC_STEPS, PERIOD)
    return lose_a_slice(cluster, job, lost=LOST, timeout_s=JOB_TIMEOUT_S, comes_back=True)


@pytest.fixture(scope="module")
def one_slice_left(slice_lost_and_back, cluster):
    """slice-b's hosts lost again, and gone from Ray's view."""
    cluster.kill_slice(LOST)
    cluster.wait_until_gone(LOST, START_BOUND_S)


def assert_slices_placed(hosts, stack, slices: int) -> None:
    """One worker per host of ``slices`` whole slices, ranks by slice, and the multislice settings MaxText needs."""
    assert [h.rank for h in hosts] == list(range(slices * stack.hosts)) and {h.world for h in hosts} == {len(hosts)}
    names = [h.settings["TPU_NAME"] for h in hosts]
    assert len(set(names)) == slices and all(names.count(n) == stack.hosts for n in names), names
    # Every host of a slice exactly once (two workers on one host would share its chips).
    assert sorted((h.settings["TPU_NAME"], h.settings["TPU_WORKER_ID"]) for h in hosts) == sorted(
        (n, str(w)) for n in set(names) for w in range(stack.hosts))
    # A slice's workers are consecutive ranks, and its MEGASCALE_SLICE_ID is that of all its hosts.
    by_slice = {n: [h for h in hosts if h.settings["TPU_NAME"] == n] for n in set(names)}
    assert all(max(h.rank for h in hs) - min(h.rank for h in hs) == stack.hosts - 1 for hs in by_slice.values())
    for h in hosts:
        settings = h.settings
        assert settings["MEGASCALE_NUM_SLICES"] == str(slices), h
        assert settings["MEGASCALE_PORT"] == str(stack.pod_env["MEGASCALE_PORT"]), h  # the stack's megascalePort
    if slices > 1:
        ids = {n: {h.settings["MEGASCALE_SLICE_ID"] for h in hs} for n, hs in by_slice.items()}
        assert all(len(i) == 1 for i in ids.values()) and sorted(i.pop() for i in ids.values()) == [
            str(s) for s in range(slices)], ids
        coordinators = {h.settings["MEGASCALE_COORDINATOR_ADDRESS"] for h in hosts}
        assert len(coordinators) == 1 and coordinators.pop(), hosts  # one coordinator, rank 0's host
    else:
        assert {h.settings["MEGASCALE_SLICE_ID"] for h in hosts} <= {"", "0"}, hosts


def test_slices_that_come_after_the_submission_are_reserved_and_get_one_worker_per_host(late_slices, stack):
    job, status, log, progress = late_slices
    assert status == "SUCCEEDED", log[-3000:]
    assert job.runtime_env["env_vars"]["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] == str(COLD_START_TIMEOUT_S)
    assert sorted(progress.steps) == [0, 1, 2]
    (hosts,) = hosts_by_group(log, progress)
    assert_slices_placed(hosts, stack, slices=2)
    # The run's mesh: dcn_* over the 2 slices MaxText is told of, ici_* over each slice's chips.
    parallelism.check_static(job.spec.maxtext, stack.outputs.chips_per_slice, int(hosts[0].settings["MEGASCALE_NUM_SLICES"]))
    assert "Using SlicePlacementGroup utility to reserve 2 slice(s) with topology '2x2x2'" in log


def test_one_log_monitor_publishes_every_hosts_worker_lines_once(late_slices, cluster):
    """The hosts share the head's session directory and leave its log monitor to publish their workers' lines
    (``LocalRayNode``): each line reaches the job's log once, none is missing."""
    _, _, log, progress = late_slices
    (hosts,) = hosts_by_group(log, progress)
    assert len(hosts) == 4  # each host's worker's line is there
    # ... and once: a line stamped to the microsecond (absl's) published twice would be there twice.
    stamped = [line for line in log.splitlines() if ABSL_TIME.search(line)]
    assert len(stamped) > 100 and len(set(stamped)) == len(stamped)
    monitors = []
    for pid in cluster.pids():
        with contextlib.suppress(OSError):
            if b"log_monitor.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                monitors.append(pid)
    assert len(monitors) == 1, monitors


def test_after_losing_a_slice_the_elastic_run_goes_on_with_the_other(slice_lost_and_back, stack):
    run = slice_lost_and_back
    assert run.status == "SUCCEEDED", run.log[-3000:]
    # Every step is in the log, but for the one-slice group's last two before its hold: MaxText writes a step's
    # line once it has buffered the next step's metrics, after that step's checkpoint save, where the group held
    # (maxtext.trainers.pre_train.train's loop; MetricLogger.buffer_and_write_metrics). The killed group may have
    # logged them before it died.
    held = run.resumed_group.restored_step + PERIOD
    assert set(range(ELASTIC_STEPS)) - {held - 1, held} <= set(run.progress.steps) <= set(range(ELASTIC_STEPS))
    first, resumed, *_ = hosts_by_group(run.log, run.progress)
    assert_slices_placed(first, stack, slices=2)
    assert_slices_placed(resumed, stack, slices=1)
    assert {h.settings["TPU_NAME"] for h in resumed} < {h.settings["TPU_NAME"] for h in first}
    assert LOST not in {h.settings["TPU_NAME"] for h in resumed}


def test_the_run_on_one_slice_resumes_from_the_checkpoint_the_two_wrote(slice_lost_and_back):
    run = slice_lost_and_back
    killed, resumed = run.killed_group, run.resumed_group
    assert killed.restored_step is None and PERIOD in run.checkpoints_at_kill
    assert resumed.restored_step == max(run.checkpoints_at_kill)
    # It trained to its next checkpoint, where it held until the lost slice came back (its log two steps short).
    held = resumed.restored_step + PERIOD
    assert sorted(resumed.steps) == list(range(resumed.restored_step + 1, held - 1))
    assert f"{HOLD_LINE} {held}" in run.log and held in run.checkpoints_at_end
    assert run.checkpoints_at_end[-1] == ELASTIC_STEPS - 1


def test_goodput_counts_the_slice_loss_and_the_return_as_recovery(slice_lost_and_back, capsys):
    """Each restart's recovery against the test's own clock: from the kill to the next group's first step, and from
    the held checkpoint (seen committed) to the first step of the group that took the slice back."""
    from gke_ray_tpu.training import report

    run = slice_lost_and_back
    assert report.main([str(run.run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["goodput"]
    buckets, wall = result["buckets"], result["wall_s"]
    assert abs(sum(buckets.values()) - wall) <= 0.05 * wall and 0 < result["goodput_pct"] < 100
    assert result["restarts"] == 2 and buckets["recovery"] > 0
    lost = run.recovery()["next_step_s"]
    back = run.recovery(run.progress.groups[2], since=run.back_at)["next_step_s"]
    assert buckets["recovery"] <= lost + back + 2, (buckets, lost, back)


def test_when_the_lost_slice_comes_back_the_run_takes_it_and_goes_on_on_both(slice_lost_and_back, stack):
    run = slice_lost_and_back
    groups = hosts_by_group(run.log, run.progress)
    assert len(groups) == 3, run.log[-3000:]
    assert_slices_placed(groups[-1], stack, slices=2)
    assert LOST in {h.settings["TPU_NAME"] for h in groups[-1]}
    assert "Deciding to resize the worker group from 2 -> 4 workers" in run.log
    # The larger group went on from the one slice's last checkpoint, not from the start.
    held = run.resumed_group.restored_step + PERIOD
    assert run.progress.groups[-1].restored_step == held and max(run.progress.steps) == ELASTIC_STEPS - 1
    assert sorted(run.progress.groups[-1].steps) == list(range(held + 1, ELASTIC_STEPS))


def test_a_slice_that_never_comes_fails_the_run_once_the_wait_ends(one_slice_left, cluster, cold_stack, tmp_path):
    job = submission(cold_stack, tmp_path, "fake-tpu-never", overrides={"steps": 3})
    started = time.monotonic()
    sid = submit(cluster.head, job, {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(SHORT_WAIT_S),
                                        SLICE_WAIT_ENV: str(2 * SHORT_WAIT_S)})
    status = wait_for_end(cluster.head, sid, JOB_TIMEOUT_S)
    took = time.monotonic() - started
    log, progress = read_job(cluster.head, sid)
    assert status == "FAILED" and not progress.steps, log[-3000:]
    assert 2 * SHORT_WAIT_S <= took < 2 * SHORT_WAIT_S + START_BOUND_S, took
    assert f"Ray Train could not place 4 workers (v5p-16 slices) in {2 * SHORT_WAIT_S} s (2 waits)" in log, log[-3000:]


@pytest.mark.parametrize("wait_s", [7, 20, 900, 1800, 4000])
def test_the_trainer_allows_as_many_start_waits_as_fit_in_its_wait_for_slices(wait_s, monkeypatch):
    from gke_ray_tpu.training.worker import trainer

    monkeypatch.setenv("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", str(wait_s))
    waits = trainer.start_retries() + 1
    assert (waits - 1) * wait_s < trainer.SLICE_WAIT_S <= waits * wait_s  # the last wait ends at or past it
