"""Every process a test session starts ends with it, however the session ends.

The tests start processes that outlive a plain kill of pytest: Ray heads and fake-TPU nodes in sessions of
their own (``training/driver/local_ray.py``), their raylets and workers, the compile check's children, the
storage emulator. Each of them inherits pytest's environment, so the session marks it there: pytest's own
process sets :data:`MARKER_ENV` to a value of its own before any test runs, and every process started
after that, in whatever session or process group, carries it in ``/proc/<pid>/environ`` (what it was started
with, unless it renames itself over that memory, as Ray's agents do: then the ``setsid`` session a process that
carries the marker leads tells). :func:`sweep` SIGKILLs every such process, except the session's pytest processes
(the xdist workers, listed in :func:`registry`).

It runs (``tests/conftest.py``):

* when pytest ends, after the fixtures' own teardown (which stops what it started, gracefully);
* on SIGINT or SIGTERM, in pytest's process and in each xdist worker, before pytest is made to stop as on
  Ctrl-C (KeyboardInterrupt: the fixtures' teardown then finds nothing left to wait for);
* in a watchdog (``python -m tests.processes watch``) that pytest starts in a session of its own, without the
  marker: when pytest's process is gone, also by SIGKILL (a CI job's timeout ends in one), it sweeps;
* when a session starts, for every earlier session whose pytest process is gone (``sweep_stale``): a
  leftover of an interrupted run is ended before this run starts anything.

A marker's value names its pytest process (pid and start time, so a reused pid is not mistaken for it);
sessions of other pytest processes that still run are never touched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARKER_ENV = "GKE_RAY_TPU_TEST_SESSION"
REGISTRY_ROOT = Path(tempfile.gettempdir()) / "gke-ray-tpu-test-sessions"
SWEEP_WAIT_S = 10.0
"""How long a sweep waits for what it SIGKILLed to be gone."""


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (the 3rd on: state, ppid, pgrp, session, ...), or None if
    the process is gone or a zombie (SIGKILLed, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields


def start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat's 22nd field), or None if it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else fields[19]


def new_marker(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{start_ticks(pid)}-{secrets.token_hex(4)}"


def owner_alive(marker: str) -> bool:
    """Whether the pytest process that made ``marker`` still runs."""
    try:
        pid, ticks, _ = marker.split("-")
        return start_ticks(int(pid)) == ticks
    except ValueError:
        return False


def registry(marker: str) -> Path:
    """The session's directory: a file ``pytest-<pid>`` for each of its pytest processes, ``watchdog-<pid>``."""
    return REGISTRY_ROOT / marker


def register(marker: str, role: str, pid: int | None = None) -> None:
    directory = registry(marker)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{role}-{os.getpid() if pid is None else pid}").touch()


def _registered_pids(marker: str, role: str) -> set[int]:
    directory = registry(marker)
    try:
        return {int(p.name.split("-", 1)[1]) for p in directory.iterdir() if p.name.startswith(role + "-")}
    except OSError:
        return set()


def marked(marker: str | None = None) -> dict[int, str]:
    """Live processes that carry a marker (``marker``'s value, or any), pid -> value."""
    found = {}
    needle = f"{MARKER_ENV}=".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(needle):
                value = item[len(needle):].decode(errors="replace")
                if (marker is None or value == marker) and start_ticks(int(entry.name)) is not None:
                    found[int(entry.name)] = value
                break
    return found


def session_id(pid: int) -> int | None:
    """The process's session (/proc/<pid>/stat's 6th field), or None if it is gone or a zombie."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[3])


def in_sessions(sessions: set[int]) -> set[int]:
    """The live processes whose session is one of ``sessions`` (not zombies: SIGKILLed, not yet reaped)."""
    return {int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()
            and session_id(int(entry.name)) in sessions}


def belonging(marker: str, spared: set[int] = frozenset()) -> set[int]:
    """The live processes of ``marker``'s session but ``spared``: those that carry it, and every process in a
    session (``setsid``) whose leader carries it, unless a spared process is in it too. A Ray head's or node's
    agents rename themselves (setproctitle), which overwrites the memory ``/proc/<pid>/environ`` is read from,
    so the marker no longer shows there; they stay in the session their ``ray start`` leads. (A session led by
    something else, the terminal's or the CI runner's that pytest runs in, is never taken whole.)"""
    carriers = set(marked(marker)) - spared
    sessions = {sid for sid in map(session_id, carriers) if sid in carriers} - {session_id(pid) for pid in spared}
    return (carriers | in_sessions(sessions)) - spared


def sweep(marker: str, wait_s: float = SWEEP_WAIT_S) -> list[int]:
    """SIGKILL every live process of ``marker``'s session (:func:`belonging`), but this one and the session's
    pytest processes; repeat until none is left (a raylet may start a worker meanwhile) or ``wait_s`` has passed.
    The pids killed."""
    spared = {os.getpid(), *_registered_pids(marker, "pytest")}
    killed: list[int] = []
    deadline = time.monotonic() + wait_s
    while True:
        left = belonging(marker, spared)
        if not left or time.monotonic() > deadline:
            return killed
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def sweep_stale() -> dict[str, list[int]]:
    """Sweep every marker whose pytest process is gone: what earlier runs left (by marker, the pids killed)."""
    stale = {}
    for marker in {*marked().values(), *(p.name for p in _listdir(REGISTRY_ROOT))}:
        if not owner_alive(marker):
            killed = sweep(marker)
            shutil.rmtree(registry(marker), ignore_errors=True)
            if killed:
                stale[marker] = killed
    return stale


def _listdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


def start_watchdog(marker: str) -> subprocess.Popen:
    """``python -m tests.processes watch <marker>`` in a session of its own and without the marker, so no signal
    for pytest's group and no sweep reaches it; it sweeps once pytest's process (the marker's owner) is gone."""
    env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-m", "tests.processes", "watch", marker], env=env, cwd=root,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    register(marker, "watchdog", proc.pid)
    return proc


def watch(marker: str, every_s: float = 0.5) -> int:
    while owner_alive(marker):
        time.sleep(every_s)
    sweep(marker)
    shutil.rmtree(registry(marker), ignore_errors=True)
    return 0


class Session:
    """The marker of this pytest process's session (xdist workers share their controller's)."""

    def __init__(self, controller: bool):
        self.controller = controller
        if controller:
            sweep_stale()
            self.marker = new_marker()
            os.environ[MARKER_ENV] = self.marker
            register(self.marker, "pytest")
            self.watchdog = start_watchdog(self.marker)
        else:
            self.marker = os.environ[MARKER_ENV]
            register(self.marker, "pytest")
            self.watchdog = None
        self._previous = {}

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, frame):
        # Another SIGINT or SIGTERM while stopping must not cut the teardown short: ignored from here on.
        for s in self._previous:
            signal.signal(s, signal.SIG_IGN)
        sweep(self.marker)
        raise KeyboardInterrupt(f"{signal.Signals(signum).name}: the processes this session started are ended")

    def finish(self) -> list[int]:
        """At the end of pytest's process: sweep (the controller only: a worker's end is not the session's)."""
        if not self.controller:
            return []
        killed = sweep(self.marker)
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
        shutil.rmtree(registry(self.marker), ignore_errors=True)
        return killed


if __name__ == "__main__":
    if sys.argv[1:2] == ["watch"] and len(sys.argv) == 3:
        sys.exit(watch(sys.argv[2]))
    print("usage: python -m tests.processes watch <marker>", file=sys.stderr)
    sys.exit(2)
