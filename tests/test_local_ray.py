"""A local Ray head or node that Ray gives up on is started again (``training/driver/local_ray.py``,
``START_ATTEMPTS``).

``ray start`` gives its raylet a fixed 30 s to register with the GCS and then exits. Here the raylet cannot
register because its node-manager port, picked free a moment before, is another process's by the time it binds
it (a test holds it), one of the two ways that happens on a busy machine; the other, a raylet slower than 30 s,
ends the same way in Ray's ``Node.__init__``.
"""

from __future__ import annotations

import contextlib
import socket
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from gke_ray_tpu.training.driver.local_ray import LocalRayHead, LocalRayNode

RAY_GAVE_UP = "The current node timed out during startup"
"""What Ray's ``Node.__init__`` raises once its raylet has not registered within 30 s."""


class _FirstAttemptOnATakenPort:
    """The first attempt's ``ray start`` gets ``taken`` as its node-manager port; later attempts what was picked."""

    def __init__(self, *args, taken: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.taken = taken
        self.commands: list[list[str]] = []

    def _command(self, *args) -> list[str]:
        command = super()._command(*args)
        if not self.commands:
            command = [f"--node-manager-port={self.taken}" if flag.startswith("--node-manager-port=") else flag
                       for flag in command]
        self.commands.append(command)
        return command


class _Head(_FirstAttemptOnATakenPort, LocalRayHead):
    pass


class _Node(_FirstAttemptOnATakenPort, LocalRayNode):
    pass


def _command_lines_with(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and text in (line := (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()):
                found.append(f"{entry.name}: {line[:200]}")
    return found


def test_a_head_and_a_node_whose_raylet_cannot_register_start_again_on_other_ports(tmp_path):
    """The head's start and the node's (on a second head) run side by side: Ray's 30 s are waited once."""
    with socket.create_server(("0.0.0.0", 0)) as held, ExitStack() as stack, ThreadPoolExecutor(1) as pool:
        taken = held.getsockname()[1]
        head_started = pool.submit(_Head(num_cpus=1, log_path=tmp_path / "head.log", multi_node=True,
                                         taken=taken).__enter__)
        stack.callback(lambda: head_started.exception() or head_started.result().stop())
        other_head = stack.enter_context(LocalRayHead(num_cpus=1, log_path=tmp_path / "other.log", multi_node=True))
        node = stack.enter_context(_Node(other_head, num_cpus=1, log_path=tmp_path / "node.log", taken=taken))
        head = head_started.result()
        assert len([n for n in head.state("nodes") if n.state == "ALIVE"]) == 1
        alive = sorted(n.node_name for n in other_head.state("nodes") if n.state == "ALIVE")
        assert len(alive) == 2 and node.name in alive, alive
        for started in (head, node):
            log = started.log_path.read_text(errors="replace")
            # Two attempts, the first on the taken port, which Ray gave up on once; its processes are gone.
            assert [f"--node-manager-port={taken}" in command for command in started.commands] == [True, False]
            assert log.count(RAY_GAVE_UP) == 1 and log.count("Local node IP") == 2, log[-3000:]
        assert _command_lines_with(f"port={taken}") == []
