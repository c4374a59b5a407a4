"""A test session to interrupt (``tests/test_processes.py`` runs ``pytest tests/session_target.py``; not collected
otherwise): it starts what the suite's tests start, each in a session of its own as they do, says so in
``$SESSION_TARGET_READY`` and waits to be stopped.

Started: a Ray head that other nodes can join and one such node (a fake-TPU cluster's shape,
``tests/fake_tpu.py``), and a child the way the compile check starts one (``preflight/xla_check.py``:
``start_new_session=True``); with ``$SESSION_TARGET_CHILD_ONLY``, the child only. The file lists the session's
marker and their pids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gke_ray_tpu.training.driver.local_ray import LocalRayHead, LocalRayNode
from tests.processes import MARKER_ENV

READY_ENV = "SESSION_TARGET_READY"
START_BOUND_S = 600
"""A bound on starting the head and the node on a loaded 2-core machine (three such sessions start at once)."""
CHILD_ONLY_ENV = "SESSION_TARGET_CHILD_ONLY"
"""Set: the child only, no Ray (a session that is SIGKILLed, where only its watchdog acts, whatever it started)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    out = tmp_path_factory.mktemp("ray")
    with LocalRayHead(num_cpus=1, log_path=out / "head.log", multi_node=True, startup_timeout_s=START_BOUND_S) as head, \
            LocalRayNode(head, num_cpus=1, log_path=out / "node.log", resources={"TPU": 4},
                         startup_timeout_s=START_BOUND_S) as node:
        yield head, node


def test_runs_until_stopped(request):
    head, node = (None, None) if os.environ.get(CHILD_ONLY_ENV) else request.getfixturevalue("cluster")
    child = subprocess.Popen([sys.executable, "-c", "import time; print(flush=True); time.sleep(3600)"],
                             start_new_session=True, stdout=subprocess.PIPE)
    child.stdout.readline()  # it runs: its exec is over, so its environment (the marker) reads whole in /proc
    Path(os.environ[READY_ENV]).write_text(json.dumps({
        "marker": os.environ[MARKER_ENV], "pytest": os.getpid(), "head": head and head._proc.pid,
        "node": node and node.proc.pid, "child": child.pid}))
    while True:
        time.sleep(1)
