"""However a test session ends, every process its tests started ends with it (``tests/processes.py``).

End to end: three pytest sessions of ``tests/session_target.py`` (on an xdist worker, as pytest.ini runs the
suite), stopped as a terminal's Ctrl-C, ``timeout -s TERM`` and a CI runner's last resort stop them: a signal to
pytest's process group (SIGINT, SIGTERM, SIGKILL). The first two have a Ray head, a node that joined it and a
compile-check-like child, all in sessions of their own; the SIGKILLed one, where pytest can do nothing and its
watchdog ends what is left, the child only. Then the pieces alone: the watchdog, and a later session ending what
an earlier one whose watchdog died too had left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.processes import (
    MARKER_ENV, in_sessions, marked, new_marker, registry, session_id, start_watchdog, sweep, sweep_stale,
)
from tests.session_target import CHILD_ONLY_ENV, READY_ENV, START_BOUND_S


def _session(tmp_path, name: str, ray: bool) -> tuple[subprocess.Popen, Path]:
    ready, output = tmp_path / f"{name}.json", tmp_path / f"{name}.out"
    env = {**os.environ, READY_ENV: str(ready), **({} if ray else {CHILD_ONLY_ENV: "1"})}
    with open(output, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider", f"--basetemp={tmp_path / name}",
             "tests/session_target.py"],
            cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    proc.output = output
    return proc, ready


def test_a_session_stopped_by_sigint_sigterm_or_sigkill_leaves_no_process_behind(tmp_path):
    sessions = {signum: _session(tmp_path, signum.name, ray=signum != signal.SIGKILL)
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)}
    deadline = time.monotonic() + START_BOUND_S
    started = {}
    try:
        while len(started) < len(sessions):
            for signum, (proc, ready) in sessions.items():
                if signum not in started and ready.is_file():
                    started[signum] = json.loads(ready.read_text())
                assert proc.poll() is None, proc.output.read_text()[-3000:]
            assert time.monotonic() < deadline, "the sessions did not start"
            time.sleep(0.5)
        for signum, (proc, _) in sessions.items():
            info = started[signum]
            # What the session started carries its marker: the head's, the node's and the child's processes.
            assert {pid for pid in (info["head"], info["node"], info["child"]) if pid} < set(marked(info["marker"]))
            os.killpg(proc.pid, signum)  # the whole group, as a terminal's Ctrl-C and timeout(1) signal it
        for proc, _ in sessions.values():
            proc.wait(timeout=300)
    finally:
        for proc, _ in sessions.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    for signum in (signal.SIGINT, signal.SIGTERM):
        proc, info = sessions[signum][0], started[signum]
        # Ended by pytest itself before it exits (its KeyboardInterrupt path: status 2).
        assert proc.returncode == pytest.ExitCode.INTERRUPTED and marked(info["marker"]) == {}, proc.output.read_text()
        # Ray's agents too, whose renaming hides the marker: nothing is left in the sessions `ray start` led.
        assert _in_sessions({info["head"], info["node"]}) == [], proc.output.read_text()[-3000:]
    # SIGKILL: pytest could do nothing; its watchdog, in a session of its own, ends the rest once pytest is gone.
    info = started[signal.SIGKILL]
    assert sessions[signal.SIGKILL][0].returncode == -signal.SIGKILL
    [watchdog] = [int(p.name.split("-")[1]) for p in registry(info["marker"]).glob("watchdog-*")] or [None]
    if watchdog is not None:  # (it may have finished already: it removes the directory last)
        while registry(info["marker"]).exists():
            assert time.monotonic() < deadline + 300, "the watchdog did not finish"
            time.sleep(0.2)
    assert marked(info["marker"]) == {}


def _in_sessions(sids: set[int]) -> list[str]:
    """The live processes in those sessions (:func:`tests.processes.in_sessions`), as ``pid name``."""
    found = []
    for pid in sorted(in_sessions(sids)):
        with contextlib.suppress(OSError):  # gone meanwhile: nothing to name
            found.append(f"{pid} {Path(f'/proc/{pid}/comm').read_text().strip()}")
    return found


_SLEEP = "import time; print(flush=True); time.sleep(600)"
"""A sleeper that first says it runs. Popen returns before the kernel has set up the new program's environment,
and until then ``/proc/<pid>/environ`` reads empty (293 of 300 reads right after Popen, with both cores busy), so
a test looks for a process's marker only after that line."""


def _sleeper(**popen) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _SLEEP], stdout=subprocess.PIPE, **popen)
    proc.stdout.readline()
    return proc


_SPAWNS = f"""
import os, subprocess, sys, time
sleep = [sys.executable, "-c", {_SLEEP!r}]
kids = [subprocess.Popen(sleep, env={{}}, stdout=subprocess.PIPE),
        subprocess.Popen(sleep, env={{**os.environ, **dict([sys.argv[1].split("=")])}}, stdout=subprocess.PIPE)]
for kid in kids:
    kid.stdout.readline()
print(*(k.pid for k in kids), flush=True)
time.sleep(600)
"""
"""Starts an unmarked sleeper and a sleeper with the marker (argv[1], ``NAME=value``); prints their pids once both
run."""


def test_a_renamed_process_goes_with_the_session_its_marked_leader_leads_and_no_other_session_is_taken_whole():
    """Every process in a session that a marked process leads (a ``ray start``) is the test session's, though its
    own environment does not show the marker (as a Ray agent's, overwritten by its new name); in a session led by
    something else (a terminal's) only the marked processes are."""
    owner = _owner()
    marker = new_marker(owner.pid)
    mark = f"{MARKER_ENV}={marker}"
    ray_start = subprocess.Popen([sys.executable, "-c", _SPAWNS, mark], env={**os.environ, MARKER_ENV: marker},
                                 start_new_session=True, stdout=subprocess.PIPE, text=True)
    terminal = subprocess.Popen([sys.executable, "-c", _SPAWNS, mark], env={k: v for k, v in os.environ.items()
                                if k != MARKER_ENV}, start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        agent, worker = map(int, ray_start.stdout.readline().split())
        neighbour, child = map(int, terminal.stdout.readline().split())
        assert set(marked(marker)) == {ray_start.pid, worker, child}  # the agent does not show the marker
        assert sorted(sweep(marker)) == sorted([ray_start.pid, agent, worker, child])
        assert _in_sessions({ray_start.pid}) == []
        assert terminal.poll() is None and session_id(neighbour) == terminal.pid  # the terminal's: left alone
    finally:
        for group in (ray_start, terminal):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group.pid, signal.SIGKILL)
        for proc in (owner, ray_start, terminal):
            proc.kill()
            proc.wait()


def _marked_sleeper(marker: str) -> subprocess.Popen:
    """A process of a session ``marker``, in a session of its own (as a Ray head is)."""
    return _sleeper(env={**os.environ, MARKER_ENV: marker}, start_new_session=True)


def _owner() -> subprocess.Popen:
    """Stands in for a pytest process: a marker names it (pid, start time) and it can be killed."""
    return _sleeper()


def test_the_watchdog_ends_the_sessions_processes_once_its_pytest_is_gone():
    owner = _owner()
    marker = new_marker(owner.pid)
    left = _marked_sleeper(marker)
    watchdog = start_watchdog(marker)
    try:
        assert set(marked(marker)) == {left.pid}  # the watchdog runs without the marker
        owner.kill()
        owner.wait()
        assert watchdog.wait(timeout=60) == 0
        assert left.wait(timeout=10) == -signal.SIGKILL and not registry(marker).exists()
    finally:
        for proc in (owner, left, watchdog):
            proc.kill()
            proc.wait()


def test_a_later_session_ends_what_an_earlier_one_left_and_spares_a_running_one():
    owner, running = _owner(), _owner()
    gone, alive = new_marker(owner.pid), new_marker(running.pid)
    leftover, kept = _marked_sleeper(gone), _marked_sleeper(alive)
    try:
        owner.kill()
        owner.wait()
        assert set(marked(gone)) == {leftover.pid}
        assert sweep_stale()[gone] == [leftover.pid] and leftover.wait(timeout=10) == -signal.SIGKILL
        assert kept.poll() is None and set(marked(alive)) == {kept.pid}  # its pytest still runs: not touched
    finally:
        for proc in (owner, running, leftover, kept):
            proc.kill()
            proc.wait()
