"""What ``LEAN_RAY_ENV`` saves on a local Ray head: Ray's defaults and it, side by side in one run.

For each setting, a fresh ``LocalRayHead`` (2 CPUs, as the README's job and the tests start it):

* idle: the CPU its processes use over ``--idle-s`` seconds after it has settled, per process;
* one job: the README's tiny job submitted to it (``python -m gke_ray_tpu.training.submit --local --address``),
  with the Ray workers that were started and never left ``ray::IDLE`` counted, and the whole machine's busy
  core-seconds while it ran (other load on the machine shows in that figure; the idle one is per process).

    .venv/bin/python bench/bench_local_head.py [--idle-s 40] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gke_ray_tpu.training.driver import local_ray  # noqa: E402
from tests.processes import stat_fields  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _session_processes(session: int) -> dict[int, tuple[str, float]]:
    """pid -> (command line, CPU seconds) of every process in ``session``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        if fields is None or int(fields[3]) != session:
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_text().replace("\0", " ").strip()
        except OSError:
            continue  # gone meanwhile
        found[int(entry)] = (command, (int(fields[11]) + int(fields[12])) / TICKS)
    return found


def _kind(command: str) -> str:
    for needle, kind in (("log_monitor", "log monitor"), ("raylet", "raylet"), ("gcs_server", "GCS"),
                         ("dashboard/agent", "dashboard agent"), ("DashboardAgent", "dashboard agent"),
                         ("RuntimeEnvAgent", "runtime env agent"), ("ray-dashboard", "dashboard"),
                         ("dashboard.py", "dashboard"), ("ray::IDLE", "idle workers"), ("client.server", "client server"),
                         ("ray start", "ray start")):
        if needle in command:
            return kind
    return "other"


def _machine_busy_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICKS  # less idle and iowait


def measure(lean: bool, idle_s: float, out: Path) -> dict:
    saved = local_ray.LEAN_RAY_ENV
    local_ray.LEAN_RAY_ENV = saved if lean else {}
    try:
        with local_ray.LocalRayHead(num_cpus=2, log_path=out / "ray-head.log") as head:
            session = os.getsid(head._proc.pid)
            time.sleep(15)  # the dashboard's modules and the agents settle
            before = _session_processes(session)
            started = time.monotonic()
            time.sleep(idle_s)
            after = _session_processes(session)
            spent = time.monotonic() - started
            idle = collections.Counter()
            for pid, (command, cpu) in after.items():
                idle[_kind(command)] += (cpu - before.get(pid, (command, 0.0))[1]) / spent

            titles: dict[int, list[str]] = {}
            done = threading.Event()

            def watch() -> None:
                while not done.is_set():
                    for pid, (command, _) in _session_processes(session).items():
                        seen = titles.setdefault(pid, [])
                        if not seen or seen[-1] != command:
                            seen.append(command)
                    time.sleep(0.25)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            busy, job_started = _machine_busy_s(), time.monotonic()
            job = subprocess.run(
                [sys.executable, "-m", "gke_ray_tpu.training.submit", "--local", "--address", head.address,
                 "--output-dir", str(out / "runs")],
                env={**os.environ, **head.address_env}, capture_output=True, text=True, timeout=600,
            )
            job_s, busy = time.monotonic() - job_started, _machine_busy_s() - busy
            done.set()
            watcher.join()
            if job.returncode != 0:
                raise SystemExit(f"the job failed ({job.returncode}): {job.stderr[-2000:]}")
            never_used = sum(1 for seen in titles.values() if seen[-1].startswith("ray::IDLE")
                             and not any(t.startswith("ray::") and not t.startswith("ray::IDLE") for t in seen))
            return {"idle": idle, "job_s": job_s, "busy_s": busy, "never_used": never_used}
    finally:
        local_ray.LEAN_RAY_ENV = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-s", type=float, default=40.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-local-head-"))
    print(f"LEAN_RAY_ENV = {local_ray.LEAN_RAY_ENV}")
    results = {}
    for name, lean in (("Ray's defaults", False), ("LEAN_RAY_ENV", True)):
        print(f"measuring a head with {name} ...", flush=True)
        results[name] = measure(lean, args.idle_s, out / ("lean" if lean else "defaults"))
    base, lean = results["Ray's defaults"], results["LEAN_RAY_ENV"]
    print(f"\nIdle head, % of a core over {args.idle_s:.0f} s (after 15 s to settle):")
    print(f"  {'process':<20} {'defaults':>9} {'lean':>9} {'lean/defaults':>14}")
    for kind in sorted(set(base["idle"]) | set(lean["idle"]), key=lambda k: -base["idle"].get(k, 0.0)):
        b, l = 100 * base["idle"].get(kind, 0.0), 100 * lean["idle"].get(kind, 0.0)
        print(f"  {kind:<20} {b:9.1f} {l:9.1f} {l / b if b else float('nan'):14.2f}")
    b, l = 100 * sum(base["idle"].values()), 100 * sum(lean["idle"].values())
    print(f"  {'all':<20} {b:9.1f} {l:9.1f} {l / b:14.2f}")
    print("\nThe README's tiny job on that head:")
    print(f"  workers started and never used: {base['never_used']} with the defaults, {lean['never_used']} lean")
    print(f"  wall {base['job_s']:.0f} s and {lean['job_s']:.0f} s; machine busy {base['busy_s']:.0f} and "
          f"{lean['busy_s']:.0f} core-s (ratio {lean['busy_s'] / base['busy_s']:.2f}; includes other load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
