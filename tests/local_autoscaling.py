"""A local Ray cluster whose worker nodes the autoscaler starts and removes: scale to zero on one machine.

Ray's own test harness for this is ``ray.cluster_utils.AutoscalingCluster``: a
head whose autoscaler (the monitor process, v1 here) launches "nodes" with the
fake multi-node provider, each a raylet with its own resources on this host.
Three things of it do not fit as it is, and :class:`LocalAutoscalingCluster`
replaces them:

* its config starts from ``fake_multi_node/example.yaml``, which the wheel
  does not ship: :data:`FAKE_MULTINODE_CONFIG` is that file's settings;
* ``start()`` and ``shutdown()`` run ``ray stop --force``, which kills every
  Ray on the host (another test session's too): the head is a
  ``LocalRayHead`` instead (its own process group, free ports),
  and the provider's nodes, started by the head's monitor, are in that group;
* Ray takes "this host" to be its outward address (a socket aimed at the
  default route): ``ray start --head --node-ip-address=127.0.0.1`` resolves
  127.0.0.1 to it for the head's GCS, monitor and dashboard, and the provider
  starts each node with no address of its own, on that address, and joins it
  to ``<that address>:6379`` unless its config names the GCS. A node that
  cannot reach the GCS there never joins, and the autoscaler, waiting on its
  launch, stalls. :data:`LOOPBACK_ENV` and the GCS address in the provider
  config keep every process of the cluster on 127.0.0.1.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from ray.cluster_utils import AutoscalingCluster

from training.driver.local_ray import LocalRayHead

HEAD_NODE_TYPE = "ray.head.default"
FAKE_NODE_ID_PREFIX = "f" * 51
"""The ids of the nodes the fake provider starts: this prefix and their count, 00001 on."""

FAKE_MULTINODE_CONFIG = {
    "cluster_name": "fake_multinode",
    "max_workers": 8,
    "provider": {
        "type": "fake_multinode",
        "use_node_id_as_ip": True,
        "disable_node_updaters": True,
        "disable_launch_config_check": True,
    },
    "available_node_types": {},
    "head_node_type": HEAD_NODE_TYPE,
    "auth": {},
    "upscaling_speed": 1.0,
    "idle_timeout_minutes": 0.1,
    "docker": {},
    "initialization_commands": [],
    "setup_commands": [],
    "head_setup_commands": [],
    "worker_setup_commands": [],
    "head_start_ray_commands": [],
    "worker_start_ray_commands": [],
    "file_mounts": {},
    "cluster_synced_files": [],
    "file_mounts_sync_continuously": False,
    "rsync_exclude": [],
    "rsync_filter": [],
}
"""Ray's ``autoscaler/_private/fake_multi_node/example.yaml`` (in Ray's repository), less its example node types."""

FAKE_CLUSTER_ENV = {
    # The fake provider refuses to run in a monitor started without it.
    "RAY_FAKE_CLUSTER": "1",
    # AutoscalingCluster's: an autoscaler update every second, not every 5.
    "AUTOSCALER_UPDATE_INTERVAL_S": "1",
}
class _AutoscalingHead(LocalRayHead):
    """A ``LocalRayHead`` whose monitor runs the autoscaler on ``config`` with the fake provider."""

    def __init__(self, config: dict, log_path: Path):
        super().__init__(num_cpus=config["available_node_types"][HEAD_NODE_TYPE]["resources"]["CPU"], log_path=log_path)
        self.config = config

    def _command(self, ports: dict[str, int]) -> list[str]:
        config = copy.deepcopy(self.config)
        # The GCS is on a free port, not the provider's default 6379.
        config["provider"]["gcs_address"] = self.gcs_address
        path = Path(self._temp_dir) / "autoscaling.json"
        path.write_text(json.dumps(config))
        return [*super()._command(ports), f"--autoscaling-config={path}"]

    def _env(self) -> dict[str, str]:
        # The base head is in Ray's single-machine mode (all on 127.0.0.1); the fake provider
        # starts its nodes as processes of this host, not with `ray start --address`.
        return {**super()._env(), **FAKE_CLUSTER_ENV}


class LocalAutoscalingCluster(AutoscalingCluster):
    """``with LocalAutoscalingCluster(worker_node_types, log_path=...) as cluster:`` a head with no CPU for
    work and no worker nodes; the autoscaler (v1) adds nodes of ``worker_node_types`` for what waits for
    resources and removes them after ``idle_timeout_minutes`` idle. ``cluster.head`` is its LocalRayHead."""

    def __init__(self, worker_node_types: dict, log_path: Path, idle_timeout_minutes: float = 0.1):
        # v1, the autoscaler the project's RayCluster runs (Ray 2.60's v2 enforces the JaxTrainer's
        # TPU head label selectors against static node-type labels).
        super().__init__(
            head_resources={"CPU": 0},
            worker_node_types=worker_node_types,
            autoscaler_v2=False,
            max_workers=sum(t["max_workers"] for t in worker_node_types.values()),
            idle_timeout_minutes=idle_timeout_minutes,
        )
        self._head = _AutoscalingHead(self._config, log_path)

    def _generate_config(self, head_resources, worker_node_types, autoscaler_v2=False, **config_kwargs):
        """AutoscalingCluster's, from :data:`FAKE_MULTINODE_CONFIG` rather than the file the wheel lacks
        (and v1's only: ``autoscaler_v2`` is always False here)."""
        config = copy.deepcopy(FAKE_MULTINODE_CONFIG)
        config["available_node_types"] = {
            **copy.deepcopy(worker_node_types),
            HEAD_NODE_TYPE: {"resources": dict(head_resources), "node_config": {}, "max_workers": 0},
        }
        return {**config, **config_kwargs}

    @property
    def head(self) -> LocalRayHead:
        """The head: its ``address``, and the token a client sends (``head.jobs()``, ``head.state()``)."""
        return self._head

    def start(self) -> None:
        self._head.__enter__()

    def shutdown(self) -> None:
        """Stop every process of the cluster: the provider's nodes are in the head's process group
        (one still alive, as when a test fails, makes this take ``LocalRayHead.stop``'s 30 s)."""
        self._head.stop()

    def __enter__(self) -> "LocalAutoscalingCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def autoscaler_log(self) -> str:
        """The monitor's log: what the autoscaler did and why ("Terminating the node ... (idle)")."""
        return (Path(self._head._temp_dir) / "session_latest" / "logs" / "monitor.log").read_text()

    def worker_nodes(self, state: str | None = None) -> list:
        """The worker nodes (state API records) in ``state`` (ALIVE, DEAD), or in any state (None)."""
        # Filtered here: the state API counts a server-side filter's misses as truncated output and raises.
        nodes = self._head.state("nodes", limit=1000)
        return [n for n in nodes if not n.is_head_node and state in (None, n.state)]
