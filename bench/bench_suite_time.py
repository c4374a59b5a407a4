"""Where the test suite's time goes: per file, the slowest tests, and the sum per kind of work.

Runs pytest (the arguments after ``--``; default: the whole suite, as ``.ci/run`` does) with this file
loaded as a plugin (``-p bench_suite_time``) and a junit file, and prints:

* each file's tests and seconds (setup + call + teardown, summed over the tests: with ``-n``
  workers the sum exceeds the wall time);
* the slowest 20 tests;
* the sum per kind. A test's kind is the most expensive thing it made happen, seen while it ran (its
  fixtures' setup and teardown included), not a list of names: the plugin wraps the places where
  that work starts and records which of them each test reached, and the seconds spent inside them:

  ======================  ====================================================================
  fake-TPU cluster        ``tests.fake_tpu.FakeTpuCluster._start`` (a Ray head and a node per TPU host)
  Ray cluster             ``LocalRayHead._start`` / ``LocalRayNode._start`` (``ray start``), or a Ray job
  compile check           ``preflight.xla_check``'s child (``python -m ...preflight.xla_compile``)
  MaxText                 MaxText imported in pytest's process, or a child process that runs it
  Pulumi mock run         ``stack.mock_engine.run_offline`` (the program on the mock engine)
  other child process     any other ``subprocess.Popen`` (pip, uv, bash, a CLI's ``--help``)
  Python only             none of these
  ======================  ====================================================================

  A test that did several is counted once, under the first kind of that list.

``--before FILE.xml`` (a junit file of an earlier run of the same tests, e.g. one taken with
``pytest --junitxml``) adds that run's figures beside this one's, file by file and kind by kind, with the
ratio after/before; the earlier run's tests get the kinds this run found for them.
``--report`` prints the report of the records a previous run left in ``--out`` instead of running pytest;
``--write-durations tests/durations.json`` writes the seconds per file that ``tests/conftest.py`` orders the
files by (longest first, so on xdist's workers the longest do not start last).

    .venv/bin/python bench/bench_suite_time.py [--before baseline.xml] [--out DIR] [--write-durations JSON]
        [-- pytest args...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
KINDS = ("fake-TPU cluster", "Ray cluster", "compile check", "MaxText", "Pulumi mock run", "other child process",
         "Python only")
"""In order of precedence: a test is counted under the first kind it used."""
RECORDS_ENV = "BENCH_SUITE_TIME_DIR"
"""Where the plugin (in pytest's process and in each xdist worker) writes its records."""


# ----------------------------------------------------------------------------------------------------------------
# The plugin: runs inside pytest (and inside each xdist worker).
# ----------------------------------------------------------------------------------------------------------------

class _Recorder:
    def __init__(self, out_dir: Path):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.path = out_dir / f"records-{worker}.jsonl"
        self.path.unlink(missing_ok=True)
        self.current: dict | None = None
        self.depth = 0
        """Nesting of wrapped calls: only the outermost one's seconds count (a fake-TPU start starts Ray nodes)."""

    def used(self, kind: str, seconds: float = 0.0, outermost: bool = True) -> None:
        if self.current is None:
            return
        self.current["kinds"].setdefault(kind, 0.0)
        if outermost:
            self.current["kinds"][kind] += seconds

    def timed(self, kind: str, function):
        recorder = self

        def wrapper(*args, **kwargs):
            recorder.depth += 1
            started = time.monotonic()
            try:
                return function(*args, **kwargs)
            finally:
                recorder.depth -= 1
                recorder.used(kind, time.monotonic() - started, outermost=recorder.depth == 0)

        wrapper.__wrapped__ = function
        return wrapper


def _popen_kind(args) -> str:
    argv = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
    text = " ".join(argv)
    if "preflight.xla_compile" in text:
        return "compile check"
    if "maxtext" in text.lower() or "orbax_probe" in text:
        return "MaxText"
    if any(Path(a).name == "ray" for a in argv[:1]) and "start" in argv:
        return "Ray cluster"
    return "other child process"


def _install(recorder: _Recorder) -> None:
    """Wrap the places where each kind of work starts (class attributes and module globals looked up at call time,
    so names the tests imported earlier are covered too)."""
    from gke_ray_tpu.preflight import xla_check
    from gke_ray_tpu.stack import mock_engine
    from gke_ray_tpu.training.driver import local_ray

    local_ray.LocalRayHead._start = recorder.timed("Ray cluster", local_ray.LocalRayHead._start)
    local_ray.LocalRayNode._start = recorder.timed("Ray cluster", local_ray.LocalRayNode._start)
    xla_check._run_child = recorder.timed("compile check", xla_check._run_child)
    mock_engine._run_in_fresh_context = recorder.timed("Pulumi mock run", mock_engine._run_in_fresh_context)
    try:
        from tests import fake_tpu
    except ImportError:  # a checkout without it
        pass
    else:
        fake_tpu.FakeTpuCluster._start = recorder.timed("fake-TPU cluster", fake_tpu.FakeTpuCluster._start)

    from ray.job_submission import JobSubmissionClient

    JobSubmissionClient.submit_job = recorder.timed("Ray cluster", JobSubmissionClient.submit_job)
    original_init = subprocess.Popen.__init__

    def popen_init(self, args, *rest, **kwargs):
        recorder.used(_popen_kind(args))
        original_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = popen_init


_recorder: _Recorder | None = None


@pytest.hookimpl(trylast=True)  # after xdist's: config.option.dist is final then
def pytest_configure(config):
    global _recorder
    out = os.environ.get(RECORDS_ENV)
    # With xdist the tests run in the workers, each with this plugin; the controller only relays their reports.
    controller = not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"
    if out and _recorder is None and not controller:
        _recorder = _Recorder(Path(out))
        _install(_recorder)


def pytest_runtest_logstart(nodeid, location):
    if _recorder is not None:
        _recorder.current = {"nodeid": nodeid, "kinds": {}, "phases": {}, "maxtext_before": "maxtext" in sys.modules,
                             "cpu_before": _cpu_s()}


def _cpu_s() -> float:
    """CPU seconds of pytest's process and of the children it (or they, down the line) waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def pytest_runtest_logreport(report):
    if _recorder is None or _recorder.current is None or report.nodeid != _recorder.current["nodeid"]:
        return
    _recorder.current["phases"][report.when] = report.duration
    _recorder.current["outcome" if report.when == "call" or report.outcome != "passed" else "_"] = report.outcome


def pytest_runtest_logfinish(nodeid, location):
    if _recorder is None or _recorder.current is None:
        return
    record = _recorder.current
    if "maxtext" in sys.modules and not record.pop("maxtext_before"):
        record["kinds"].setdefault("MaxText", 0.0)  # this test imported MaxText into pytest's process
    record.pop("maxtext_before", None)
    record.pop("_", None)
    record["cpu_s"] = _cpu_s() - record.pop("cpu_before")
    with open(_recorder.path, "a") as f:
        f.write(json.dumps(record) + "\n")
    _recorder.current = None


# ----------------------------------------------------------------------------------------------------------------
# The report.
# ----------------------------------------------------------------------------------------------------------------

def kind_of(kinds: dict) -> str:
    return next((k for k in KINDS if k in kinds), "Python only")


def read_records(out_dir: Path) -> dict[str, dict]:
    records = {}
    for path in sorted(out_dir.glob("records-*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            record["seconds"] = sum(record["phases"].values())
            records[record["nodeid"]] = record
    return records


def junit_nodeid(case: ET.Element) -> str:
    """pytest's node id of a junit testcase (classname ``tests.test_x[.Class]``, name ``test_y[param]``)."""
    parts = case.get("classname", "").split(".")
    classes = []
    while parts and not parts[-1].startswith("test_") and len(parts) > 1:
        classes.insert(0, parts.pop())
    return "::".join(["/".join(parts) + ".py", *classes, case.get("name", "")])


def read_junit(path: Path) -> dict[str, float]:
    root = ET.parse(path).getroot()
    return {junit_nodeid(case): float(case.get("time", 0)) for case in root.iter("testcase")}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def report(records: dict[str, dict], before: dict[str, float] | None, wall: dict[str, float]) -> str:
    out = []
    seconds = {n: r["seconds"] for n, r in records.items()}
    cpu = {n: r.get("cpu_s", 0.0) for n, r in records.items()}
    kinds = {n: kind_of(r["kinds"]) for n, r in records.items()}
    total = sum(seconds.values())
    by_file = defaultdict(list)
    for n, s in seconds.items():
        by_file[_file(n)].append(s)
    before_file = defaultdict(list)
    for n, s in (before or {}).items():
        before_file[_file(n)].append(s)
    files = sorted(set(by_file) | set(before_file), key=lambda f: -sum(by_file.get(f, [0])))
    cpu_file = defaultdict(float)
    for n, c in cpu.items():
        cpu_file[_file(n)] += c
    header = ["file", "tests", "s", "share", "cpu s"] + (["tests before", "s before", "after/before"] if before else [])
    rows = []
    for f in files:
        now = sum(by_file.get(f, []))
        row = [f, len(by_file.get(f, [])), f"{now:.1f}", f"{now / total:.1%}" if total else "-", f"{cpu_file[f]:.0f}"]
        if before:
            was = sum(before_file.get(f, []))
            row += [len(before_file.get(f, [])), f"{was:.1f}", f"{now / was:.2f}" if was else "-"]
        rows.append(row)
    btotal = sum((before or {}).values())
    rows.append(["all", len(seconds), f"{total:.1f}", "100%", f"{sum(cpu.values()):.0f}"] + (
        [len(before), f"{btotal:.1f}", f"{total / btotal:.2f}" if btotal else "-"] if before else []))
    out += ["Per file (seconds summed over the tests: setup + call + teardown; cpu s: CPU seconds of pytest's process "
            "and of the children it waited for)", _table(rows, header), ""]

    out.append("Slowest 20 tests")
    slow = sorted(seconds, key=lambda n: -seconds[n])[:20]
    out.append(_table([[n, f"{seconds[n]:.1f}", f"{cpu[n]:.0f}", kinds[n]] + (
        [f"{before[n]:.1f}" if n in before else "-"] if before else []) for n in slow],
        ["test", "s", "cpu s", "kind"] + (["s before"] if before else [])))
    out.append("")

    header = ["kind", "tests", "s", "share", "cpu s", "s inside"] + (["s before", "after/before"] if before else [])
    rows = []
    for kind in KINDS:
        tests = [n for n in records if kinds[n] == kind]
        inside = sum(r["kinds"].get(kind, 0.0) for r in records.values())
        now = sum(seconds[n] for n in tests)
        row = [kind, len(tests), f"{now:.1f}", f"{now / total:.1%}" if total else "-",
               f"{sum(cpu[n] for n in tests):.0f}", f"{inside:.1f}"]
        if before:
            was = sum(s for n, s in before.items() if kinds.get(n, "Python only") == kind)
            row += [f"{was:.1f}", f"{now / was:.2f}" if was else "-"]
        rows.append(row)
    out += ["Per kind (each test under the first kind it used; 's inside': seconds within those calls, all tests)",
            _table(rows, header), ""]
    if before:
        gone = sorted(set(before) - set(records))
        new = sorted(set(records) - set(before))
        out.append(f"tests: {len(before)} before, {len(records)} now ({len(new)} new, {len(gone)} not found now)")
        out += [f"  not found now: {n}" for n in gone[:20]]
    if wall:
        out.append("wall: " + ", ".join(f"{k} {v:.1f} s" for k, v in wall.items()))
    outcomes = defaultdict(int)
    for r in records.values():
        outcomes[r.get("outcome", "passed")] += 1
    out.append("outcomes: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="junit XML of an earlier run of the same tests")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-suite-time"),
                        help="where the records and this run's junit go (default: %(default)s)")
    parser.add_argument("--report", action="store_true", help="print the report of the records in --out; run nothing")
    parser.add_argument("--write-durations", type=Path, metavar="JSON",
                        help="write this run's seconds per file there (tests/durations.json orders the files), "
                             "and with --setup-seconds the run's wall time (the workflow's timeout follows it)")
    parser.add_argument("--setup-seconds", type=int, metavar="S",
                        help="bin/setup's seconds on the fresh clone this run was measured on")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wall = {}
    if not args.report:
        for old in args.out.glob("records-*.jsonl"):
            old.unlink()
        # Only this folder (for -p bench_suite_time): the tests' Ray jobs inherit the environment, and the repository on
        # PYTHONPATH would hand them code a test checks they cannot find without its archive.
        env = {**os.environ, RECORDS_ENV: str(args.out),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, "-m", "pytest", "-p", "bench_suite_time", f"--junitxml={args.out / 'junit.xml'}",
               "-o", "junit_duration_report=total", *pytest_args]
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        wall["bench (pytest's process)"] = time.monotonic() - started
        (args.out / "pytest.log").write_text(done.stdout + done.stderr)
        summary = [line for line in done.stdout.splitlines() if re.search(r" in [0-9.]+s", line)]
        if summary:
            print(summary[-1])
            m = re.search(r" in ([0-9.]+)s", summary[-1])
            wall["pytest's summary"] = float(m.group(1))
        (args.out / "wall.json").write_text(json.dumps(wall))
        if done.returncode not in (0, 1):
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    elif (args.out / "wall.json").is_file():
        wall = json.loads((args.out / "wall.json").read_text())
    records = read_records(args.out)
    if not records:
        print(f"no records in {args.out}", file=sys.stderr)
        return 1
    before = read_junit(args.before) if args.before else None
    print(report(records, before, wall))
    if args.write_durations:
        by_file = defaultdict(float)
        for nodeid, record in records.items():
            by_file[_file(nodeid)] += record["seconds"]
        measured = {"tests": len(records), "pytest_s": round(wall["pytest's summary"]),
                    "setup_s": args.setup_seconds, "cores": os.cpu_count()} if args.setup_seconds else None
        args.write_durations.write_text(json.dumps({
            "measured": measured,
            "files": {f: round(s, 1) for f, s in sorted(by_file.items(), key=lambda kv: -kv[1])},
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
