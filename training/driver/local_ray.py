"""A throwaway Ray head on 127.0.0.1, for the local run and the tests.

``ray start --head --block`` runs in its own process group, so stopping it
stops exactly the processes it started (raylet, GCS, dashboard, workers) and
nothing else on the machine; ``ray stop`` would kill every Ray on the host.
Every port is picked free (its workers' too), so two local heads (two test sessions) coexist.
``LocalRayNode`` adds a second node to such a head, for a drill that loses a
whole node (``tests/drill.py``).

A head runs with Ray's token auth, as every cluster of the stack does, on a
fresh random token of its own: whoever talks to it (the submit command, the
tests, the benches) sends ``head.headers`` or uses ``head.jobs()`` and
``head.state()``. The token reaches Ray's processes through their environment,
never their command line; Ray's auth settings in the caller's environment
(``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``) are replaced,
so they can neither turn auth off nor swap the token.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Mapping, Self

from gke_ray_tpu.training.driver.errors import ClusterError
from gke_ray_tpu.training.driver.ray_auth import ADDRESS_TOKEN_ENV, RAY_AUTH_ENV, bearer

SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for multi-node clusters (``ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR``); "0" keeps a node on loopback."""

_PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--ray-client-server-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--node-manager-port",
    "--object-manager-port",
)

LEAN_RAY_ENV = {
    # Ray's log monitor globs its log folder every 0.1 s until the folder holds 1,000 files, then every 0.5 s
    # (log_monitor.py's RAY_LOG_MONITOR_MANY_FILES_THRESHOLD): a node's new log files are found within 0.5 s
    # either way, and the monitor of an idle node uses about half the CPU (bench/bench_local_head.py).
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    # Ray starts num_cpus idle workers when the first driver connects; a job's actors come with a runtime env
    # of their own and start workers for it, so the README's job left two of them unused to the end.
    "RAY_prestart_worker_first_driver": "0",
    # Ray's own metrics, which nothing scrapes from a throwaway head: every Ray process records and exports them,
    # each node's dashboard agent takes every worker's CPU and memory (psutil) every 5 s for them, and the
    # dashboard its own and its modules' (each one's /proc smaps) every 5 s. Off, and the two every minute.
    "RAY_enable_metrics_collection": "0",
    "REPORTER_UPDATE_INTERVAL_MS": "60000",
    "METRICS_RECORD_INTERVAL_S": "60",
}
"""Ray settings for a throwaway head and its nodes: less CPU for Ray's own processes; a job's workers and its log
are what they were."""

TPU_LOG_DIR_ENV = "TPU_LOG_DIR"
"""Where libtpu writes its logs, and what Ray links into a node's log folder for its log monitor to publish to every
driver (``ray/_private/node.py``). Unset, that is the machine's ``/tmp/tpu_logs``: every libtpu log on the machine,
a compile check's or an earlier run's among them, would reach each local job's log. A local head and its nodes set
it to a folder of the head's own."""

TEMP_DIR_ENV = "TMPDIR"
"""Where Python's ``tempfile`` and ``multiprocessing`` put their files in the head's and its nodes' processes, and so
in its jobs'. Ray's dashboard starts its modules from a multiprocessing forkserver, whose socket folder
(``/tmp/pymp-*``) stays behind however the head stops; a local head's is a folder of its own, removed with it."""

RAY_START = (sys.executable, "-m", "gke_ray_tpu.training.driver.ray_start", "start")
"""``ray start`` as Ray's CLI runs it, less Serve's commands (``training/driver/ray_start.py``)."""

WORKER_PORTS_FREE = ("--min-worker-port=0", "--max-worker-port=0")
"""Each worker process binds a port the system picks (as Ray's own ``cluster_utils`` starts its nodes), not one of
``ray start``'s fixed 10002-19999, which every other Ray on this machine hands out too."""


START_ATTEMPTS = 3
"""How many times a head or node is started before its start fails. ``ray start`` gives its raylet a fixed 30 s to
register with the GCS and then exits (Ray 2.60's ``Node.__init__``; the ``RAY_raylet_start_wait_time_s`` its
message names is not read), which on 2 cores shared with other work happens; a port picked a moment before may
also have been taken since. Each attempt picks new ports, all within the start's one ``startup_timeout_s``."""

STARTUP_TIMEOUT_S = 180.0
"""The default bound on a head's or node's start, all its attempts: room for each of ``START_ATTEMPTS`` to wait
out Ray's 30 s after ``ray start`` itself took as long again on a busy machine."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.create_server(("127.0.0.1", 0))) for _ in range(count)]
        return [s.getsockname()[1] for s in socks]


class Started:
    """A context manager around ``_start``: ``_close`` runs on exit, and when the start fails half way."""

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._close()


class LocalRayHead(Started):
    """``with LocalRayHead(num_cpus=2, log_path=...) as head:`` then use ``head.address``."""

    def __init__(
        self, num_cpus: int, log_path: Path, startup_timeout_s: float = STARTUP_TIMEOUT_S, multi_node: bool = False,
        env: Mapping[str, str] | None = None,
    ):
        self.num_cpus = num_cpus
        self.multi_node = multi_node
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.env = dict(env or {})
        """More environment for the head and every process of its jobs (a test's storage emulator)."""
        self.token = secrets.token_hex(32)
        """This head's own token: 256 random bits, as ``ray get-auth-token --generate`` makes."""
        self._proc: subprocess.Popen | None = None
        self._temp_dir: str | None = None
        self.address = ""
        self.gcs_address = ""
        self.agent_address = ""
        """The head node's dashboard agent (it takes job submissions too: ``POST /api/job_agent/jobs/``)."""

    def _start(self) -> None:
        # Ray's unix sockets live under the temp dir; their paths must stay short.
        self._temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        self.tpu_log_dir.mkdir()  # Ray links it only if it is a folder, else /tmp/tpu_logs
        self.scratch_dir.mkdir()  # tempfile falls back to /tmp when TMPDIR is not a folder
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _start_until_up(self._launch, self._up, "the local Ray head did not start", self.log_path,
                        self.startup_timeout_s)

    def _launch(self, log_mode: str) -> subprocess.Popen:
        ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS))))
        self.address = f"http://127.0.0.1:{ports['--dashboard-port']}"
        self.gcs_address = f"127.0.0.1:{ports['--port']}"
        self.agent_address = f"http://127.0.0.1:{ports['--dashboard-agent-listen-port']}"
        with open(self.log_path, log_mode) as log:
            # Started outside the caller's directory, so a job finds only the code its runtime env ships.
            self._proc = subprocess.Popen(
                self._command(ports), stdout=log, stderr=subprocess.STDOUT, env=self._env(),
                start_new_session=True, cwd=self._temp_dir,
            )
        return self._proc

    def _command(self, ports: dict[str, int]) -> list[str]:
        """``ray start --head`` on 127.0.0.1 and ``ports`` (a subclass adds flags)."""
        return [
            *RAY_START, "--head", "--block",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            f"--num-cpus={self.num_cpus}",
            "--object-store-memory=268435456",
            f"--temp-dir={self._temp_dir}",
            "--disable-usage-stats",
            *(f"{flag}={port}" for flag, port in ports.items()),
            *WORKER_PORTS_FREE,
        ]

    def _env(self) -> dict[str, str]:
        """The head's environment, which every Ray process it starts inherits (a subclass adds to it)."""
        # Ray's dashboard looks for ~/ray_bootstrap_config.yaml to report which cloud it runs on and,
        # without one, asks the cloud metadata servers (169.254.169.254), usage stats disabled or not
        # (UsageStatsHead.run). A local head has one in its own home: nothing leaves the machine.
        home = Path(self._temp_dir)
        (home / "ray_bootstrap_config.yaml").write_text("provider:\n  type: local\n")
        return {
            **caller_env(),
            "HOME": str(home),
            # With usage stats off, the dashboard still tells usage-stats.ray.io so; here it tells
            # a closed port of this machine instead.
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
            # A throwaway head has nothing to drain; the default makes stop() take 30 s.
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            # `ray start` swaps --node-ip-address=127.0.0.1 for the machine's outward address
            # (services.resolve_ip_for_localhost) unless Ray is in its single-machine mode, which
            # this selects: every process of the head then uses 127.0.0.1. A head that other nodes
            # join (multi_node) cannot have it: Ray then refuses `ray start --address`.
            **({} if self.multi_node else {SINGLE_MACHINE_ENV: "0"}),
            **self.cluster_env,
            **self.env,
            **self.auth_env,
        }

    @property
    def cluster_env(self) -> dict[str, str]:
        """What the head's and its nodes' Ray processes all get: this venv's python first on PATH (the job's entry
        point and the workers run it), :data:`LEAN_RAY_ENV`, the libtpu and temp folders and the cluster's address."""
        bin_dir = Path(sys.executable).parent
        return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **LEAN_RAY_ENV,
                TPU_LOG_DIR_ENV: str(self.tpu_log_dir), TEMP_DIR_ENV: str(self.scratch_dir), **self.own_address_env}

    @property
    def tpu_log_dir(self) -> Path:
        """The libtpu log folder of this head and its nodes (:data:`TPU_LOG_DIR_ENV`), in its temp dir."""
        return Path(self._temp_dir) / "tpu_logs"

    @property
    def scratch_dir(self) -> Path:
        """The temp folder of this head's and its nodes' processes (:data:`TEMP_DIR_ENV`), in its temp dir."""
        return Path(self._temp_dir) / "tmp"

    @property
    def own_address_env(self) -> dict[str, str]:
        """Where a Ray process of this head that connects without an address (Ray Train's placement-group cleaner
        does) finds its cluster. Without it Ray looks for running GCS processes, and with another Ray instance on
        the machine it finds two and refuses to choose."""
        return {"RAY_ADDRESS": self.gcs_address}

    @property
    def auth_env(self) -> dict[str, str]:
        """What turns token auth on in a Ray process of this head (and tells it the token)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    @property
    def address_env(self) -> dict[str, str]:
        """What ``python -m gke_ray_tpu.training.submit --address <head.address>`` needs in its environment to get in."""
        return {ADDRESS_TOKEN_ENV: self.token}

    @property
    def headers(self) -> dict[str, str]:
        """The header every HTTP request to this head needs."""
        return bearer(self.token)

    def jobs(self):
        """A JobSubmissionClient for this head that sends its token."""
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address, headers=self.headers)

    def state(self, resource: str, **options) -> list:
        """Ray's state API on this head with its token: ``head.state("nodes", filters=[...])`` is ``list_nodes``
        (``list_nodes`` and its twins send a token only when this process's own RAY_AUTH_MODE says so)."""
        from ray.util.state.api import StateApiClient
        from ray.util.state.common import ListApiOptions, StateResource

        client = StateApiClient(self.address, headers={"Content-Type": "application/json", **self.headers})
        return client.list(StateResource(resource), options=ListApiOptions(**options), raise_on_missing_output=True)

    def alive_nodes(self) -> set[str]:
        """The names of the nodes Ray lists alive (``ray start --node-name``; the head's is its address)."""
        # Not filtered by the state API: once a node has died, a filtered list is shorter than the cluster's total
        # and the API refuses it as truncated (Ray 2.60's _raise_on_missing_output).
        return {node.node_name for node in self.state("nodes") if node.state == "ALIVE"}

    def _up(self) -> bool:
        """Whether the dashboard answers and lists the head's node alive (its raylet registered, so ``ray start``
        stays up)."""
        import requests
        from ray.util.state.exception import RayStateApiException

        try:
            return requests.get(f"{self.address}/api/version", headers=self.headers, timeout=2).ok and bool(
                self.alive_nodes())
        except (requests.RequestException, RayStateApiException):
            return False

    def stop(self) -> None:
        """SIGTERM ``ray start`` (it shuts its processes down in order), then
        SIGKILL whatever of its process group is left after 30 s."""
        if self._proc is not None:
            try:
                self._proc.send_signal(signal.SIGTERM)
                if not _group_gone(self._proc, 30):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                    _group_gone(self._proc, 10)
            except ProcessLookupError:
                pass
            self._proc = None
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def _close(self) -> None:
        self.stop()


_NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)


class LocalRayNode(Started):
    """``with LocalRayNode(head, num_cpus=1, log_path=...) as node:`` a worker node of ``head``;
    ``node.kill()`` SIGKILLs all its processes at once, as when a VM is reclaimed. ``env`` is more
    environment for the node and its workers (what a pod's spec and GKE's webhooks give it), ``resources``
    its custom resources (``ray start --resources``)."""

    def __init__(
        self, head: LocalRayHead, num_cpus: int, log_path: Path, startup_timeout_s: float = STARTUP_TIMEOUT_S,
        env: Mapping[str, str] | None = None, resources: Mapping[str, float] | None = None,
    ):
        self.head = head
        self.num_cpus = num_cpus
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.env = dict(env or {})
        self.resources = dict(resources or {})
        self.proc: subprocess.Popen | None = None
        self.name = ""
        """The node's name in Ray's view (``ray start --node-name``), each attempt's own: a raylet of an attempt
        that gave up may still register, later."""

    def _up(self) -> bool:
        """Whether the head lists this node alive (False while its state API is not up yet)."""
        from ray.util.state.exception import RayStateApiException

        try:
            return self.name in self.head.alive_nodes()
        except RayStateApiException:
            return False

    def _start(self) -> None:
        if not self.head.multi_node:
            raise ClusterError("a LocalRayNode joins a LocalRayHead(multi_node=True) only (Ray's single-machine mode refuses it)")
        _start_until_up(self._launch, self._up, f"the local Ray node did not join {self.head.gcs_address}",
                        self.log_path, self.startup_timeout_s)

    def _command(self, name: str, ports: dict[str, int]) -> list[str]:
        """``ray start`` joining the head as node ``name`` on ``ports``. The head's session directory, without a
        log monitor of its own: the head's publishes every node's worker logs, once (a monitor per node would each
        publish them all). Ray's own nodes on one machine run so (ray.cluster_utils.Cluster.add_node: one log
        monitor per physical host)."""
        return [
            *RAY_START, f"--address={self.head.gcs_address}", "--block",
            "--node-ip-address=127.0.0.1", f"--node-name={name}", f"--num-cpus={self.num_cpus}",
            "--object-store-memory=268435456", f"--temp-dir={self.head._temp_dir}", "--include-log-monitor=False",
            "--disable-usage-stats", *(f"{flag}={port}" for flag, port in ports.items()), *WORKER_PORTS_FREE,
            *([f"--resources={json.dumps(self.resources)}"] if self.resources else []),
        ]

    def _launch(self, log_mode: str) -> subprocess.Popen:
        self.name = f"local-node-{secrets.token_hex(4)}"
        ports = dict(zip(_NODE_PORT_FLAGS, free_ports(len(_NODE_PORT_FLAGS))))
        env = {**caller_env(), **self.head.cluster_env, **self.env, **self.head.auth_env}
        with open(self.log_path, log_mode) as log:
            self.proc = subprocess.Popen(self._command(self.name, ports), stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True, cwd=self.head._temp_dir)
        return self.proc

    def kill(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            self.proc = None

    def _close(self) -> None:
        self.kill()


def caller_env() -> dict[str, str]:
    """This process's environment less Ray's auth settings, which a local Ray process gets from its head."""
    return {k: v for k, v in os.environ.items() if k not in RAY_AUTH_ENV}


def _start_until_up(launch: Callable[[str], subprocess.Popen], up: Callable[[], bool], failed: str,
                    log_path: Path, timeout_s: float) -> None:
    """Launch ``ray start`` (``launch(mode)``: the mode its log is opened in) until ``up()``. One that exits first
    (Ray gave up on its raylet) is killed with its process group and launched again, up to ``START_ATTEMPTS``,
    all within ``timeout_s``; ``failed`` begins the one-line error."""
    deadline = time.monotonic() + timeout_s
    for attempt in range(1, START_ATTEMPTS + 1):
        proc = launch("wb" if attempt == 1 else "ab")
        while not up():
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"{failed} within {timeout_s:.0f} s (log: {log_path})")
            time.sleep(0.5)
        else:
            return
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
        _kill_group(proc)
        if attempt == START_ATTEMPTS or time.monotonic() > deadline:
            raise ClusterError(f"{failed}: `ray start` exited with status {proc.returncode}: "
                               f"{tail[0] if tail else 'no output'} (attempt {attempt} of {START_ATTEMPTS}; "
                               f"log: {log_path})")


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (what its ``ray start`` started) and wait until it is gone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
        _group_gone(proc, 10)
    except ProcessLookupError:
        proc.wait()


def _group_gone(proc: subprocess.Popen, wait_s: float) -> bool:
    """Reap the leader, then wait until no process of its group is left."""
    deadline = time.monotonic() + wait_s
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return False
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
