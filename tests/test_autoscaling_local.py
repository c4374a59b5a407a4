"""Scale to zero on this machine: the local job on a Ray cluster that has no worker nodes until it asks.

A head with no CPU for work and no worker nodes (``tests.local_autoscaling``:
Ray's AutoscalingCluster harness, autoscaler v1 as on the project's RayCluster,
not v2), the tiny MaxText job submitted through ``python -m training.submit
--local --address`` with the cold-start runtime env, and then what the
autoscaler did, counted in nodes: it started one node per training worker, the
workers trained on them, the job succeeded, and once idle the nodes were
removed. A slow test (a real job, ~1.5 min); the deadlines only bound the waits.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import time

import pytest
from ray.job_submission import JobStatus

from core.job_spec import COLD_START_TIMEOUT_S, submission_id_for
from training import submit
from training.driver.progress import Progress
from training.driver.submission import LOCAL_WORKERS, for_local
from tests.local_autoscaling import FAKE_NODE_ID_PREFIX, LocalAutoscalingCluster

RUN = "pytest-from-zero"
WORKER_NODE_TYPES = {
    "ray.worker.cpu": {
        # One training worker per node, as one per slice on the cluster; 2 fit this 2-core machine.
        "resources": {"CPU": 1, "object_store_memory": 256 * 2**20},
        "node_config": {},
        "min_workers": 0,
        "max_workers": LOCAL_WORKERS,
    },
}
SCALE_DOWN_DEADLINE_S = 120
"""A bound, not an expectation: the idle timeout is 6 s and the autoscaler looks every second."""


@pytest.fixture
def cluster(tmp_path):
    with LocalAutoscalingCluster(WORKER_NODE_TYPES, log_path=tmp_path / "ray-head.log", idle_timeout_minutes=0.1) as c:
        yield c


def _submit_cold_start(head, out, monkeypatch) -> tuple[int, str]:
    """The submit command, in this process, building its job with the cold-start runtime env."""
    monkeypatch.setattr(submit, "for_local", functools.partial(for_local, cold_start=True))
    for name, value in head.address_env.items():
        monkeypatch.setenv(name, value)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = submit.main(["--local", "--address", head.address, "--output-dir", str(out), f"run_name={RUN}"])
    return rc, err.getvalue()


def _wait_for_no_alive_workers(cluster: LocalAutoscalingCluster) -> list:
    deadline = time.monotonic() + SCALE_DOWN_DEADLINE_S
    while (alive := cluster.worker_nodes("ALIVE")) and time.monotonic() < deadline:
        time.sleep(2)
    return alive


def test_the_autoscaler_starts_a_node_per_worker_for_the_job_and_removes_them_once_idle(
    cluster, tmp_path, monkeypatch
):
    assert cluster.worker_nodes() == []  # none alive, none ever

    rc, err = _submit_cold_start(cluster.head, tmp_path, monkeypatch)
    assert rc == 0, err
    client = cluster.head.jobs()
    sid = submission_id_for(RUN)
    assert client.get_job_status(sid) == JobStatus.SUCCEEDED
    env_vars = client.get_job_info(sid).runtime_env["env_vars"]
    assert env_vars["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] == str(COLD_START_TIMEOUT_S)
    progress = Progress()
    progress.feed(client.get_job_logs(sid))
    progress.flush()
    assert sorted(progress.steps) == list(range(10))

    launched = cluster.worker_nodes()
    assert len(launched) == LOCAL_WORKERS, launched
    assert all(n.node_id.startswith(FAKE_NODE_ID_PREFIX) and n.node_ip == "127.0.0.1" for n in launched), launched
    workers = [a for a in cluster.head.state("actors", limit=1000) if a.class_name == "RayTrainWorker"]
    assert sorted(a.node_id for a in workers) == sorted(n.node_id for n in launched)

    assert _wait_for_no_alive_workers(cluster) == []
    removed = cluster.worker_nodes()
    assert sorted(n.node_id for n in removed) == sorted(n.node_id for n in launched)  # and none started since
    assert [n.state_message for n in removed] == ["Expected termination: Terminated by autoscaler."] * LOCAL_WORKERS
    log = cluster.autoscaler_log()
    assert all(re.search(rf"Terminating the node with id {n.node_id} .*\(idle\)", log) for n in removed), log[-3000:]
